"""The export queue's hooks into the process: signal handlers that flush, and fork.

``flush()`` called from a signal handler never waits on the code it interrupted.

A preemptible job flushes when it receives its warning, a signal (SLURM's
``SIGUSR1``). The handler runs on the main thread between two bytecodes of
whatever it interrupted: ending a span that completes a batch (which wakes the
export thread), or a flush of its own waiting for its marker. Each of these
runs in a child process that a timer signal interrupts every few milliseconds;
a flush that waits for a lock the interrupted code holds hangs it for good,
and the child is then killed with its stacks printed.

Each export queue asks to be made inert in a forked child; that request goes
with the queue (every ``configure()`` makes new ones).
"""

from __future__ import annotations

import gc
import os
import signal
import textwrap
import tracemalloc
import warnings
from pathlib import Path

import pytest
from _child_script import run_script
from _forks import exit_code

from asynctrace.export import _queue, _queue_worker
from asynctrace.export._queue import QueuedSpanProcessor

needs_setitimer = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="needs signal.setitimer (POSIX)"
)

HANG_S = 20  # the child prints its stacks and exits with 1 after this long


def _run(body: str) -> list[str]:
    """Run *body* in a child that dumps its stacks and exits after ``HANG_S``."""
    return run_script(textwrap.dedent(body), HANG_S)


@needs_setitimer
def test_a_flush_in_a_signal_handler_while_spans_end_completes(tmp_path: Path) -> None:
    """Spans end one batch each (every end wakes the export thread) while a timer
    signal's handler calls ``asynctrace.flush()``: every flush returns, every span
    is exported."""
    out = _run(
        f"""
        import signal, time
        import asynctrace as at

        telemetry = at.configure({{"enabled": True, "exporters": ["chrome"],
                                  "output_dir": {str(tmp_path)!r}, "span_groups": "all",
                                  "max_export_batch_size": 1}})
        flushes = failed = 0
        busy = False

        def on_warning(signum, frame):
            global flushes, failed, busy
            if busy:  # a signal that comes during the handler's own flush
                return
            busy = True
            flushes += 1
            if not at.flush(timeout_s=5.0):
                failed += 1
            busy = False

        signal.signal(signal.SIGALRM, on_warning)
        signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
        ended, start = 0, time.monotonic()
        while time.monotonic() - start < 4.0:
            with at.managed_span("data_processing", "step"):
                pass
            ended += 1
        signal.setitimer(signal.ITIMER_REAL, 0)
        assert at.flush(timeout_s=10.0)
        (stats,) = telemetry.stats().values()
        print(ended, stats.exported, stats.dropped, flushes, failed)
        at.shutdown()
        """
    )
    ended, exported, dropped, flushes, failed = map(int, out)
    assert flushes > 100, "the timer should have fired throughout"
    assert failed == 0
    assert (exported, dropped) == (ended, 0)


@needs_setitimer
def test_a_flush_in_a_signal_handler_while_a_flush_waits_completes() -> None:
    """Against a stuck exporter, the main thread's flushes and the handler's wait for
    the same marker: each times out on its own, none waits for the other."""
    out = _run(
        """
        import signal, threading, time
        from asynctrace.export._queue import QueuedSpanProcessor

        release = threading.Event()

        class StuckSink:
            def export(self, batch):
                release.wait()
                return len(batch), 0

            def flush(self):
                return True

            def shutdown(self):
                pass

        queue = QueuedSpanProcessor(StuckSink(), name="stuck", max_queue_size=100,
                                    max_export_batch_size=1, schedule_delay_millis=1)
        queue.on_end(object())
        deadline = time.monotonic() + 5
        while queue.stats().in_flight != 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        handled = timed_out = 0

        busy = False

        def handler(signum, frame):
            global handled, timed_out, busy
            if busy:
                return
            busy = True
            handled += 1
            if not queue.force_flush(1):
                timed_out += 1
            busy = False

        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
        waits, start = 0, time.monotonic()
        while time.monotonic() - start < 6.0:
            assert not queue.force_flush(waits % 3)  # 0 to 2 ms: mostly inside flush's code
            waits += 1
        signal.setitimer(signal.ITIMER_REAL, 0)
        release.set()
        assert queue.force_flush(5000)
        markers = sum(item.__class__.__name__ == "_Marker" for item in queue._queue)
        print(waits, handled, timed_out, queue.stats().exported, markers)
        queue.shutdown_within(5)
        """
    )
    waits, handled, timed_out, exported, markers = map(int, out)
    assert waits > 300
    assert handled > 100
    assert timed_out == handled  # the exporter was stuck throughout: no flush could finish
    assert exported == 1
    assert markers == 0


class _Sink:
    def export(self, batch: list[object]) -> tuple[int, int]:
        return len(batch), 0

    def flush(self) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def _cycle(count: int) -> None:
    for _ in range(count):
        processor = QueuedSpanProcessor(_Sink(), name="cycle", schedule_delay_millis=5)
        processor.on_end(object())  # type: ignore[arg-type]
        assert processor.shutdown_within(5)


def test_a_queue_gone_leaves_no_fork_hook_behind() -> None:
    """300 queues made and shut down keep nothing of the export queue's code alive (the
    code before kept a hook per queue, 0.66 KB, run at every fork)."""
    _cycle(20)  # the fork registry's own list at its settled size
    gc.collect()
    ours = [tracemalloc.Filter(True, module.__file__) for module in (_queue, _queue_worker)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(ours)
        _cycle(300)
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(ours)
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 16 * 1024, f"{grown} bytes kept by {_queue.__file__}"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_queue_is_inert_in_a_forked_child() -> None:
    """A live queue, forked: the child's copy flushes at once and drops what it is given
    (the worker is the parent's); the parent's queue goes on."""
    processor = QueuedSpanProcessor(_Sink(), name="forked", schedule_delay_millis=5)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
            pid = os.fork()
        if pid == 0:
            flushed = processor.force_flush(100)
            processor.on_end(object())  # type: ignore[arg-type]  # dropped: no worker here
            stats = processor.stats()
            os._exit(0 if flushed and (stats.queued, stats.dropped) == (0, 1) else 3)
        assert exit_code(pid, what="the forked child flushing") == 0
        processor.on_end(object())  # type: ignore[arg-type]
        assert processor.force_flush(5000)
        assert processor.stats().exported == 1
    finally:
        processor.shutdown_within(5)
