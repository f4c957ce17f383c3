"""Every public name of the package and its integrations says what it does."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import asynctrace_contrib
import pytest

import asynctrace

# Methods that override a documented method of an OpenTelemetry or stdlib base
# class and take their meaning from it: (module, class, method).
INHERITS_ITS_MEANING: frozenset[tuple[str, str, str]] = frozenset()


def _modules() -> Iterator[ModuleType]:
    """Every module of both packages, imported."""
    for package in (asynctrace, asynctrace_contrib):
        yield package
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            yield importlib.import_module(info.name)


def _has_doc(doc: object) -> bool:
    """True for a docstring with text in it."""
    return isinstance(doc, str) and bool(doc.strip())


def _class_doc(cls: type) -> object:
    """The class's own docstring, not one that a dataclass or NamedTuple made up."""
    doc = cls.__dict__.get("__doc__")
    if isinstance(doc, str) and doc.startswith(cls.__name__ + "("):
        return None  # the signature that dataclasses and NamedTuple put there
    return doc


def _member_doc(member: object) -> tuple[bool, object]:
    """Whether a class-body member is a method or property, and its own docstring."""
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    if isinstance(member, property):
        return True, member.__doc__
    if inspect.isfunction(member):
        return True, member.__doc__
    cached = getattr(member, "func", None)  # functools.cached_property
    if inspect.isfunction(cached) and hasattr(member, "attrname"):
        return True, cached.__doc__
    return False, None


def _undocumented() -> Iterator[str]:
    """Dotted names of public functions, classes, methods and properties with no docstring."""
    for module in _modules():
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            where = f"{module.__name__}.{name}"
            if inspect.isfunction(obj):
                if not _has_doc(obj.__doc__):
                    yield where
            elif inspect.isclass(obj):
                if obj.__name__ != name:
                    continue  # an alias; the class is checked under its own name
                if not _has_doc(_class_doc(obj)):
                    yield where
                yield from _undocumented_members(module.__name__, obj, where)


def _undocumented_members(module: str, cls: type, where: str) -> Iterator[str]:
    """The public methods and properties defined in ``cls``'s body with no docstring."""
    fields = {*getattr(cls, "__dataclass_fields__", ()), *getattr(cls, "_fields", ())}
    for attr, member in vars(cls).items():
        if attr.startswith("_") or attr in fields:
            continue  # a field's default is a value, not a method of the class
        if (module, cls.__name__, attr) in INHERITS_ITS_MEANING:
            continue
        is_method, doc = _member_doc(member)
        if is_method and not _has_doc(doc):
            yield f"{where}.{attr}"


def test_every_public_name_has_a_docstring() -> None:
    """Public functions, classes and their own methods and properties have docstrings."""
    missing: list[Any] = sorted(set(_undocumented()))
    if missing:
        pytest.fail("no docstring:\n  " + "\n  ".join(missing))
