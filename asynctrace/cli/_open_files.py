"""The open-file limit, raised for a merge that keeps every input open at once."""

from __future__ import annotations

from collections.abc import Callable

from ._common import CliError

__all__ = ["allow_open_files"]

_SPARE_FILES = 32  # descriptors besides the inputs: stdio, the output, captures, imports


def _unchanged() -> None:
    return None


def allow_open_files(count: int, prog: str) -> Callable[[], None]:
    """Make sure *count* input files can be open at once, as a merge of them keeps them.

    The soft ``RLIMIT_NOFILE`` (``ulimit -n``, often 1024) is raised towards the
    hard limit when it is too low; past the hard limit the command is refused
    with a message that says how to raise it. Where the platform has no such
    limit (no :mod:`resource` module) nothing is checked.

    Returns:
        A function that puts the soft limit back as it was (call it once the
        files are read: a library caller's limit is left as it found it).

    Raises:
        CliError: the hard limit is too low for *count* inputs.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return _unchanged
    needed = count + _SPARE_FILES
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - the limit cannot be read
        return _unchanged
    infinity = resource.RLIM_INFINITY
    if soft == infinity or soft >= needed:
        return _unchanged
    wanted = needed if hard == infinity else min(needed, hard)
    previous = soft

    def restore() -> None:
        try:
            now, now_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if now == wanted:  # not changed since by someone else
                resource.setrlimit(resource.RLIMIT_NOFILE, (previous, now_hard))
        except (OSError, ValueError):  # pragma: no cover - the limit cannot be set back
            pass

    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        soft = wanted
    except (OSError, ValueError):
        pass
    if soft < needed:
        restore()
        raise CliError(
            f"{count} input files are read at once (merged by time), but this process may "
            f"open only {soft} files (RLIMIT_NOFILE, hard limit {hard}); raise the limit "
            f"with ulimit -n {needed} before running {prog} (the hard limit is raised in "
            "/etc/security/limits.conf, or with docker run --ulimit nofile=...)"
        )
    return restore
