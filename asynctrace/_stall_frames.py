"""Which frames of a blocked loop thread are the program's, and the blocked task's context.

Read by the loop-stall watchdog (:mod:`asynctrace._stall_watchdog`) from its own
thread while the loop thread is blocked.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import operator
import os
import sys
import sysconfig
from collections.abc import Callable
from functools import partial
from itertools import chain
from typing import Any, Final, cast

__all__ = ["MAX_FRAMES", "Frame", "current_frames", "stack", "task_context"]

MAX_FRAMES: Final = 8  # frames kept per sample, innermost first
# Frames walked per sample before the walk only looks for where the program's code starts
# (cheaply, by kind) and stops at the first frame of the program or of the loop's machinery.
_MAX_WALK: Final = 256
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
# With the separator: a sibling such as ``asynctrace_contrib`` or ``asynctrace_x`` is not ours.
_OWN_PREFIX: Final = os.path.join(_OWN_DIR, "")
_ASYNCIO_PREFIX: Final = os.path.join(os.path.dirname(os.path.abspath(asyncio.__file__)), "")


def _library_prefixes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the standard library's directories, the site directories inside them)."""
    paths = sysconfig.get_paths()
    stdlib = tuple({os.path.join(paths[k], "") for k in ("stdlib", "platstdlib") if k in paths})
    sites = tuple({os.path.join(paths[k], "") for k in ("purelib", "platlib") if k in paths})
    return stdlib, sites


_STDLIB, _SITES = _library_prefixes()
_LOOP_PACKAGES: Final = ("uvloop", "anyio", "sniffio")
_CONTRIB: Final = "asynctrace_contrib"  # the package of asynctrace's integrations
_LIBRARY: Final = 0  # asynctrace and its contrib, the standard library, frozen modules
_PROGRAM: Final = 1  # the program's code and the libraries it uses
_LOOP: Final = 2  # the event loop's machinery: asyncio, uvloop, anyio, sniffio
# File name -> its kind. Not keyed by code object: code objects compare equal across
# files (3.11 leaves the file name out), and a one-line function of the program would
# take the kind of an identical one of the standard library seen first.
_kinds: dict[str, int] = {}


def _library(path: str) -> bool:
    """Whether *path* is asynctrace's or the standard library's (not a site directory)."""
    if path.startswith(_OWN_PREFIX):
        return True
    return path.startswith(_STDLIB) and not path.startswith(_SITES)


def _kind(code: Any) -> int:
    path: str = code.co_filename
    found = _kinds.get(path)
    if found is not None:
        return found
    kind = _PROGRAM
    if path.startswith("<"):  # frozen modules, exec'd strings of the interpreter
        kind = _LIBRARY if path.startswith("<frozen") else _PROGRAM
    elif path.startswith(_ASYNCIO_PREFIX):
        kind = _LOOP
    elif _library(path):
        kind = _LIBRARY
    else:
        parts = path.replace("\\", "/").split("/")
        if any(package in parts for package in _LOOP_PACKAGES):
            kind = _LOOP
        elif _CONTRIB in parts:  # asynctrace's integrations: wrappers, like its own frames
            kind = _LIBRARY
    if len(_kinds) < 4096:
        _kinds[path] = kind
    return kind


# CPython 3.11's sys._current_frames() holds the runtime's lock on the thread list while
# it makes frame objects, and making one may start a collection; code the collection runs
# (a finalizer, a weakref callback, gc.callbacks) can hand the GIL to a thread that then
# waits for that lock (a thread starting or ending, or reading frames too), and the
# process hangs (python/cpython#106883, #116969). 3.10 makes no object there; 3.12
# collects only between bytecodes.
_COLLECTION_MAY_HANG: Final = sys.version_info[:2] == (3, 11)
# f() called from C, with no object made: operator.call, which 3.11 has.
_call = cast("Callable[[Callable[[], Any]], Any]", getattr(operator, "call", None))


def current_frames() -> dict[int, Any]:
    """``sys._current_frames()``, made with the collector off where a collection could hang.

    On 3.11 the collector is turned off for the call and back on after it (when
    it was on), as the fix proposed for CPython does in C. The calls run from C
    (``map`` over built-ins, with nothing made that the collector tracks in
    between), so no bytecode runs among them: no other thread runs, or sees
    the collector off, until it is on again. Only a Python audit hook on
    ``sys._current_frames`` runs code there; if it raises, the collector is
    turned back on before the error propagates.
    """
    if not _COLLECTION_MAY_HANG:
        return sys._current_frames()
    turned_off: list[bool] = []
    # The iterators are made here, in bytecode: chain() takes them as they are.
    branches = (
        iter((sys._current_frames,)),  # off already (the program's choice): leave it off
        iter((partial(turned_off.append, True), gc.disable, sys._current_frames, gc.enable)),
    )
    steps = chain.from_iterable(map(branches.__getitem__, map(_call, (gc.isenabled,))))
    try:
        done = list(map(_call, steps))
    except BaseException:
        if turned_off and not gc.isenabled():
            gc.enable()
        raise
    frames: dict[int, Any] = done[0] if len(done) == 1 else done[2]
    return frames


Frame = tuple[str, int, str]  # (file, line, function)


def stack(frame: Any) -> tuple[tuple[Frame, ...], bool]:
    """The innermost frames of the program's code, and whether the thread runs the program.

    It does when a frame of the program's code comes before (inside) every
    frame of the event loop's machinery: a callback of the program that
    blocks inside the standard library (``copy.deepcopy``, ``json.dumps``)
    is the program's; the loop waiting in its selector, with only the code
    that started the loop further out, is not.
    """
    out: list[Frame] = []
    in_program = False
    in_loop = False
    walked = 0
    while frame is not None and walked < _MAX_WALK and len(out) < MAX_FRAMES:
        code = frame.f_code
        kind = _kind(code)
        if kind == _PROGRAM:
            in_program = in_program or not in_loop
            out.append(
                (code.co_filename, frame.f_lineno or 0, getattr(code, "co_qualname", code.co_name))
            )
        elif kind == _LOOP:
            in_loop = True
        frame = frame.f_back
        walked += 1
    if frame is not None and not out and not in_loop:
        # Deep in a library (a copy.deepcopy of a nested structure): where the program's
        # code begins, if it does before the loop's machinery, is further out still.
        kinds = _kinds
        while frame is not None:
            code = frame.f_code
            found = kinds.get(code.co_filename)
            kind = _kind(code) if found is None else found
            if kind == _PROGRAM:
                return _program_frames(frame), True
            if kind == _LOOP:
                break
            frame = frame.f_back
    return tuple(out), in_program


def _program_frames(frame: Any) -> tuple[Frame, ...]:
    """The program's frames from *frame* (one of them) outwards, up to :data:`MAX_FRAMES`.

    Walked at most :data:`_MAX_WALK` frames, as the start of :func:`stack` is.
    """
    out: list[Frame] = []
    walked = 0
    while frame is not None and walked < _MAX_WALK and len(out) < MAX_FRAMES:
        code = frame.f_code
        if _kind(code) == _PROGRAM:
            out.append(
                (code.co_filename, frame.f_lineno or 0, getattr(code, "co_qualname", code.co_name))
            )
        frame = frame.f_back
        walked += 1
    return tuple(out)


def task_context(task: object) -> contextvars.Context | None:
    """The context a task runs in (read from the watchdog while the task is blocked)."""
    get = getattr(task, "get_context", None)  # Python 3.12+
    if callable(get):
        found = get()
        return found if isinstance(found, contextvars.Context) else None
    own = getattr(task, "_context", None)  # the pure-Python Task
    if isinstance(own, contextvars.Context):
        return own
    for ref in gc.get_referents(task):  # the C Task of 3.10 and 3.11 keeps it unexposed
        if ref.__class__ is contextvars.Context:
            return ref
    return None
