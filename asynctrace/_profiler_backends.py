"""The profilers a step can be captured with, by name, and their extras.

``python``: viztracer (function calls and asyncio tasks, as Chrome trace
events; :mod:`asynctrace._viztracer_backend`). ``torch``: ``torch.profiler``
(CPU, and CUDA where present), exported as a Chrome trace
(:mod:`asynctrace._torch_backend`). Each is an extra; a missing one is
reported when the configuration is read.
"""

from __future__ import annotations

import importlib
import importlib.util

from ._capture_backend import Backend
from ._errors import MissingExtraError
from ._torch_backend import TorchBackend
from ._viztracer_backend import PythonBackend

__all__ = ["BACKENDS", "check_backend", "import_backend"]

_EXTRAS = {"python": ("profile", "viztracer"), "torch": ("torch", "torch")}


def check_backend(name: str) -> None:
    """Raise :class:`MissingExtraError` if backend *name*'s package is not installed."""
    extra, module = _EXTRAS[name]
    try:
        spec = importlib.util.find_spec(module)
    except ValueError:  # in sys.modules without a spec: a stand-in, not the package
        spec = None
    if spec is None:
        raise MissingExtraError(extra, module)


def import_backend(name: str) -> None:
    """Import backend *name*'s package on the calling thread.

    Done where the profiler is configured, not on a background thread: a
    process forked while another thread imports inherits the import lock
    held, and its own import of the package waits for good.
    """
    importlib.import_module(_EXTRAS[name][1])


BACKENDS: dict[str, type[Backend]] = {"python": PythonBackend, "torch": TorchBackend}
