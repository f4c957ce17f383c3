"""The SIGTERM handler: shut telemetry down without waiting on the interrupted code.

A Python signal handler runs on the main thread, between two bytecodes of
whatever it interrupted, and that code may hold any lock: the session
tracer's, an SDK span's, the lock of the thread table inside
``Thread.start()``. So the handler waits for no lock and starts no thread. A
helper thread, started when the handler is installed, waits on a pipe; the
handler writes one byte to wake it, then waits on a second pipe (``select``,
no lock) up to :data:`WAIT_S` for the shutdown to finish:

- finished in time (the common case): the signal goes on to the previous
  handler at once, from the handler, as if asynctrace had not been there;
- not finished: the interrupted code may hold a lock the shutdown needs, so
  the handler returns and lets it run on; when the shutdown is done the
  helper sends SIGTERM to the main thread again, and the handler, called a
  second time, hands the signal on. A second SIGTERM from outside hands it
  on at once instead, and the helper then sends nothing: whichever comes
  first claims the hand-off (a lock taken without waiting), so the previous
  handler runs once.

In a forked child the handler only hands the signal on: the helper thread
and the telemetry it would shut down are the parent's.

Closed off the main thread (a shutdown run in a worker thread), the handler
cannot be removed: it stays installed, only handing the signal on, with its
pipes open. The next handler made on the main thread, or
:func:`release_closed` (every ``configure()`` on the main thread), removes it
and closes its pipes, so handlers never pile up one on another.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Final, Union

from ._own_threads import leaving_signals

__all__ = ["WAIT_S", "SigtermHandler", "release_closed"]

logger = logging.getLogger("asynctrace")

WAIT_S: Final = 0.25
"""How long the handler waits for the shutdown before it lets the interrupted code run on."""

_SignalHandler = Union[Callable[[int, Union[FrameType, None]], Any], int, None]  # noqa: UP007


class SigtermHandler:
    """Installs itself as the SIGTERM handler (main thread only); :meth:`close` removes it.

    *shutdown* runs once, on the helper thread, when SIGTERM arrives.

    Example:
        >>> handler = SigtermHandler(lambda: None)  # doctest: +SKIP
        >>> handler.close()  # doctest: +SKIP
    """

    def __init__(self, shutdown: Callable[[], object]) -> None:
        """Start the helper and install the handler.

        Raises:
            OSError: no pipe could be made (no descriptor left);
            RuntimeError: the helper thread could not be started;
            ValueError: not on the main thread. Nothing is left behind.
        """
        self._shutdown = shutdown
        self._pid = os.getpid()
        self.previous: _SignalHandler = release_closed()
        self._go_read, self._go_write = os.pipe()
        try:
            self._done_read, self._done_write = os.pipe()
        except BaseException:
            _close(self._go_read, self._go_write)
            raise
        self._fired = False
        self._deferred = False
        self._stopped = False
        # Taken (without blocking) by whichever of the handler, the helper and a second
        # signal hands a deferred signal on, so that the previous handler runs once.
        self._claim = threading.Lock()
        self._resent = False  # the helper claimed and sent the signal again
        self._thread = threading.Thread(
            target=leaving_signals(self._run), name="asynctrace-sigterm", daemon=True
        )
        try:
            self._thread.start()
        except BaseException:
            self._close_fds()
            raise
        try:
            signal.signal(signal.SIGTERM, self.handle)
        except BaseException:
            self._stopped = True
            self._wake(b"q")  # the helper closes the pipes and ends
            raise

    # -- the signal handler (main thread, between two bytecodes) ---------------------

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """Wake the helper, wait a little for the shutdown, then hand the signal on."""
        if self._stopped or os.getpid() != self._pid:
            self._hand_on(signum, frame)  # a closed handler, a forked child
            return
        if self._fired:  # the helper's own signal, or a second one from outside
            if self._resent or self._claim.acquire(blocking=False):
                self._resent = False
                self._hand_on(signum, frame)
            return
        self._fired = True
        os.write(self._go_write, b"t")
        if self._finished(WAIT_S):
            self._hand_on(signum, frame)
            return
        self._deferred = True  # the helper signals again when the shutdown is done
        # It finished just now and may not have seen the flag: one of us hands it on.
        if self._finished(0.0) and self._claim.acquire(blocking=False):
            self._hand_on(signum, frame)

    def _finished(self, timeout_s: float) -> bool:
        try:
            ready, _, _ = select.select([self._done_read], [], [], timeout_s)
        except (OSError, ValueError):
            return True
        return bool(ready)

    def _hand_on(self, signum: int, frame: FrameType | None) -> None:
        """Behave as the previous handler would have."""
        previous = self.previous
        if signal.getsignal(signum) == self.handle:
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN:
            return
        else:  # SIG_DFL, or a handler installed outside Python: die of the signal
            # Whatever is installed now (a handler set after ours, which called us) has
            # run: the signal's default action ends the process, not another call of it.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    # -- the helper thread -----------------------------------------------------------

    def _run(self) -> None:
        try:
            command = os.read(self._go_read, 1)
        except OSError:
            return
        if command != b"t":
            if command == b"q":  # the handler was removed: nothing can write to the pipes
                self._close_fds()
            return
        try:
            self._shutdown()
        except BaseException as exc:  # the signal must still be handed on
            logger.warning("asynctrace: shutdown on SIGTERM failed", exc_info=exc)
        os.write(self._done_write, b"d")
        if self._deferred and self._claim.acquire(blocking=False):
            main = threading.main_thread().ident
            if main is not None:
                self._resent = True
                signal.pthread_kill(main, signal.SIGTERM)

    # -- removal -----------------------------------------------------------------------

    @property
    def fired(self) -> bool:
        """Whether SIGTERM arrived (the shutdown ran or is running on the helper)."""
        return self._fired

    def close(self) -> None:
        """Put the previous handler back (on the main thread) and stop the helper.

        Off the main thread the handler cannot be removed: it stays installed
        and only hands the signal on from then on, until the main thread
        removes it (:func:`release_closed`, the next handler made).
        """
        if self._stopped or self._fired:
            return
        self._stopped = True
        child = os.getpid() != self._pid  # a forked child: the pipes' other ends are the parent's
        if threading.current_thread() is not threading.main_thread():
            # Still installed, so its pipes stay open (handle() reads one); the helper ends.
            if not child:
                self._wake(b"s")
            return
        if signal.getsignal(signal.SIGTERM) == self.handle:
            previous = self.previous
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        if child:  # this process's copies of the pipes; the parent's helper is not told
            self._close_fds()
        else:
            self._wake(b"q")  # the helper closes the pipes and ends

    def _wake(self, command: bytes) -> None:
        try:
            os.write(self._go_write, command)
        except OSError:
            pass

    def _close_fds(self) -> None:
        _close(self._go_read, self._go_write, self._done_read, self._done_write)

    def _release(self) -> None:
        """Close the pipes of a handler closed off the main thread (now uninstalled).

        Its helper was told to end; its pipes are closed once it has, never
        under it (a descriptor number it still reads could be reused).
        """
        if os.getpid() == self._pid:
            self._thread.join(1.0)
            if self._thread.is_alive():
                return  # keep its pipes rather than close them under it
        self._close_fds()  # in a forked child: this process's copies


def release_closed() -> _SignalHandler:
    """Remove the SIGTERM handlers closed off the main thread; the handler now in place.

    Each one removed puts back the handler it replaced and has its pipes
    closed; a handler that is still live (or has fired) is left alone. Main
    thread only.

    Example:
        >>> release_closed() == signal.getsignal(signal.SIGTERM)
        True
    """
    current: _SignalHandler = signal.getsignal(signal.SIGTERM)
    handler = current
    owner = getattr(handler, "__self__", None)
    while isinstance(owner, SigtermHandler) and owner._stopped and handler == owner.handle:
        owner._release()
        handler = owner.previous
        owner = getattr(handler, "__self__", None)
    if handler is not current:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if handler is None else handler)
    return handler


def _close(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
