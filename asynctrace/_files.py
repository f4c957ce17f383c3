"""Output files: the directory every writer of this process shares."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ._errors import ConfigurationError

__all__ = ["writable_dir"]


def writable_dir(raw: str) -> Path:
    """Create *raw* if needed and prove it writable, or raise ConfigurationError."""
    directory = Path(raw).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise ConfigurationError(
            f"output_dir: {raw!r} is not a writable directory ({type(exc).__name__}: "
            f"{exc.strerror or exc}); accepted: a directory path this process can create "
            "and write to"
        ) from exc
    return directory
