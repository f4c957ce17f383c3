"""Wrappers compiled with the wrapped function's own parameter list.

A wrapper whose parameters mirror the wrapped function's forwards them
without packing ``*args, **kwargs`` on every call, which is most of a
disabled decorator's cost. Where the parameters cannot be mirrored (a
signature advertised rather than the code's own, a built-in's text
signature, names that would clash), the wrapper takes and forwards
``*args, **kwargs``.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from keyword import iskeyword
from typing import Any, TypeVar, cast

__all__ = ["PREFIX", "compile_wrapper", "default_name", "unpartial"]

F = TypeVar("F", bound=Callable[..., Any])


def unpartial(fn: Any) -> Any:
    """The function inside any layers of ``functools.partial``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def default_name(fn: Callable[..., Any]) -> str:
    """The function's qualified name; never its ``repr``, which can hold a partial's
    arguments (a token among them) or an address that differs per object."""
    target = unpartial(fn)
    name = getattr(target, "__qualname__", None)
    return name if isinstance(name, str) and name else type(target).__qualname__


PREFIX = "_at_"  # of every name a compiled wrapper defines or reads


def _advertises_signature(fn: object) -> bool:
    """Whether a ``__signature__`` is advertised anywhere :func:`inspect.signature` looks.

    That is on *fn* itself, on the function inside a partial, a bound method,
    a ``staticmethod`` or ``classmethod``, on a class's ``__init__`` or
    ``__new__``, and on a callable object's class or its ``__call__``. A chain
    too long to follow counts as advertised.
    """
    todo = [fn]
    for _ in range(64):
        if not todo:
            return False
        item = todo.pop()
        if "__signature__" in getattr(item, "__dict__", {}):
            return True
        if isinstance(item, functools.partial):
            todo.append(item.func)
        elif isinstance(item, (types.MethodType, staticmethod, classmethod)):
            todo.append(item.__func__)
        elif isinstance(item, type):
            todo += [
                inspect.getattr_static(item, "__init__", None),
                inspect.getattr_static(item, "__new__", None),
            ]
        elif item is not None and not inspect.isroutine(item):  # a callable object
            if inspect.getattr_static(type(item), "__signature__", None) is not None:
                return True
            todo.append(inspect.getattr_static(type(item), "__call__", None))
    return True


def _runs_python_code(fn: object) -> bool:
    """Whether what a call of *fn* runs first is a Python function (it has ``__code__``).

    Looks through partials, bound methods, ``staticmethod`` and ``classmethod``,
    and a callable object's class's ``__call__``. A built-in (and a class)
    describes its parameters in a text signature, whose defaults are not
    always what omitting the argument does (``complex(real='1+2j', imag=0)``
    refuses a string with any *imag*): it is not mirrored.
    """
    target = unpartial(fn)
    if isinstance(target, (types.MethodType, staticmethod, classmethod)):
        target = target.__func__
    if isinstance(target, type):
        return False
    if not inspect.isroutine(target):  # a callable object
        target = inspect.getattr_static(type(target), "__call__", None)
        if isinstance(target, (staticmethod, classmethod)):
            target = target.__func__
    return isinstance(getattr(target, "__code__", None), types.CodeType)


def _forwarding(fn: Callable[..., Any]) -> tuple[str, str, dict[str, Any]] | None:
    """Parameter list, forwarding call and defaults that mirror *fn*'s signature.

    A wrapper with the wrapped function's exact parameters avoids packing
    ``*args, **kwargs`` on every call, which is most of the disabled-path
    cost. ``None`` when the signature cannot be mirrored.
    """
    if _advertises_signature(fn):
        return None  # an advertised signature may not be what the code accepts
    if not _runs_python_code(fn):
        return None  # a built-in's text signature: its defaults may not be its behaviour
    try:
        signature = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):
        return None
    params: list[str] = []
    call: list[str] = []
    defaults: dict[str, Any] = {}
    kinds = inspect.Parameter
    saw_star = False
    positional_only_done = False
    for i, p in enumerate(signature.parameters.values()):
        if p.name.startswith(PREFIX) or not p.name.isidentifier() or iskeyword(p.name):
            return None
        if p.kind is not kinds.POSITIONAL_ONLY and not positional_only_done:
            positional_only_done = True
            if params:
                params.append("/")
        default = ""
        if p.default is not kinds.empty:
            key = f"{PREFIX}d{i}"
            defaults[key] = p.default
            default = f"={key}"
        if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD):
            params.append(p.name + default)
            call.append(p.name)
        elif p.kind is kinds.VAR_POSITIONAL:
            saw_star = True
            params.append("*" + p.name)
            call.append("*" + p.name)
        elif p.kind is kinds.KEYWORD_ONLY:
            if not saw_star:
                saw_star = True
                params.append("*")
            params.append(p.name + default)
            call.append(f"{p.name}={p.name}")
        else:  # VAR_KEYWORD
            params.append("**" + p.name)
            call.append("**" + p.name)
    if not positional_only_done and params:
        params.append("/")
    return ", ".join(params), ", ".join(call), defaults


def compile_wrapper(fn: F, source: Callable[[str, str], str], names: dict[str, Any]) -> F:
    """Compile ``_at_wrapper`` with *fn*'s own parameter list and wrap it around *fn*.

    *source* turns ``(parameters, forwarding call)`` into the function's
    source; *names* (given without the ``_at_`` prefix, which is added) are
    its globals. When the parameters cannot be mirrored, the wrapper takes
    and forwards ``*args, **kwargs``.
    """
    forwarding = _forwarding(fn)
    params, call = "*args, **kwargs", "*args, **kwargs"
    defaults: dict[str, Any] = {}
    if forwarding is not None:
        params, call, defaults = forwarding
    namespace = {f"{PREFIX}{key}": value for key, value in names.items()}
    namespace.update(defaults)
    qualname = default_name(fn)
    filename = f"<asynctrace wrapper of {qualname!r}>"
    exec(compile(source(params, call), filename, "exec"), namespace)
    wrapper = namespace[f"{PREFIX}wrapper"]
    functools.update_wrapper(wrapper, fn)
    if not isinstance(getattr(fn, "__name__", None), str):  # a partial, a callable object
        wrapper.__name__ = qualname.rpartition(".")[2]
        wrapper.__qualname__ = qualname
        target = unpartial(fn)
        # The function's (or the object's class's) module and a partial's function's
        # docstring, not the partial class's ("functools", "partial(func, ...)").
        module = getattr(target, "__module__", None)
        wrapper.__module__ = module if isinstance(module, str) else None
        if isinstance(fn, functools.partial):
            wrapper.__doc__ = getattr(target, "__doc__", None)
    return cast("F", wrapper)
