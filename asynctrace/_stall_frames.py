"""Which frames of a blocked loop thread are the program's, and the blocked task's context.

Read by the loop-stall watchdog (:mod:`asynctrace._stalls`) from its own
thread while the loop thread is blocked.
"""

from __future__ import annotations

import contextvars
import gc
import os
import sysconfig
from typing import Any, Final

__all__ = ["MAX_FRAMES", "Frame", "stack", "task_context"]

MAX_FRAMES: Final = 8  # frames kept per sample, innermost first
_MAX_WALK: Final = 256  # frames walked per sample
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


def _library_prefixes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the standard library's directories, the site directories inside them)."""
    paths = sysconfig.get_paths()
    stdlib = tuple({os.path.join(paths[k], "") for k in ("stdlib", "platstdlib") if k in paths})
    sites = tuple({os.path.join(paths[k], "") for k in ("purelib", "platlib") if k in paths})
    return stdlib, sites


_STDLIB, _SITES = _library_prefixes()
_LOOP_PACKAGES: Final = ("uvloop", "anyio", "sniffio")
_is_program: dict[Any, bool] = {}  # code object -> whether its frames are the program's


def _program_code(code: Any) -> bool:
    found = _is_program.get(code)
    if found is not None:
        return found
    path = code.co_filename
    if path.startswith("<"):  # frozen modules, exec'd strings of the interpreter
        mine = not path.startswith("<frozen")
    elif path.startswith(_OWN_DIR) or (path.startswith(_STDLIB) and not path.startswith(_SITES)):
        mine = False
    else:
        parts = path.replace("\\", "/").split("/")
        mine = not any(package in parts for package in _LOOP_PACKAGES)
    if len(_is_program) < 4096:
        _is_program[code] = mine
    return mine


Frame = tuple[str, int, str]  # (file, line, function)


def stack(frame: Any) -> tuple[tuple[Frame, ...], bool]:
    """The innermost frames of the program's code, and whether the innermost frame is one."""
    out: list[Frame] = []
    innermost = True
    first_is_program = False
    walked = 0
    while frame is not None and walked < _MAX_WALK and len(out) < MAX_FRAMES:
        code = frame.f_code
        if _program_code(code):
            if innermost:
                first_is_program = True
            out.append(
                (code.co_filename, frame.f_lineno or 0, getattr(code, "co_qualname", code.co_name))
            )
        innermost = False
        frame = frame.f_back
        walked += 1
    return tuple(out), first_is_program


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
