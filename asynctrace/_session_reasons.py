"""How a session's end reason is recorded: redacted as exception text is, and bounded."""

from __future__ import annotations

from ._exception_text import EXCEPTION_TEXT_CHARS, exception_reason
from ._payloads import _count_cut
from ._session_names import bounded_text

__all__ = ["exception_text", "reason_text"]


def reason_text(reason: object) -> str | None:
    """A ``finalized`` reason as recorded: redacted like exception text (it often quotes
    one), and bounded as a payload's string is (see :func:`bounded_text`)."""
    if reason is None:
        return None
    if isinstance(reason, BaseException):
        return exception_text(type(reason), reason)
    try:
        text = reason if isinstance(reason, str) else str(reason)
    except Exception:
        return f"<unprintable {type(reason).__name__}>"
    return bounded_text(text)


def exception_text(exc_type: type[BaseException], exc: BaseException | None) -> str:
    """``"ValueError: <message>"``, redacted and bounded as on a span (a huge message
    costs the caller bounded time), a cut counted as a payload's is."""
    text = exception_reason(exc_type, exc)
    if len(text) > EXCEPTION_TEXT_CHARS:
        _count_cut()
    return text
