"""The chrome writer's inline track placement: tracks nest and stay bounded, whatever the
owners' order, the overlaps and the batches."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest
from test_chrome import assert_tracks_nest

from asynctrace._fast import FastTracerProvider
from asynctrace.export import read_chrome_trace


class _Owner:
    """A task's stand-in for a span's owner: named, weak-referenceable."""

    def __init__(self, n: int) -> None:
        self.n = n

    def get_name(self) -> str:
        return f"owner-{self.n}"


def _batch(rng: random.Random, tracer: Any, owners: list[_Owner], count: int) -> list[Any]:
    """*count* ended spans of random owners: mostly one after another, some swallowing
    earlier ones (a parent), some partly overlapping (which go to overflow tracks)."""
    spans, now = [], 1_000_000
    for i in range(count):
        roll = rng.random()
        if roll < 0.6:
            start, end = now, now + rng.randint(1, 50) * 1000
            now = end + rng.randint(0, 3) * 1000
        elif roll < 0.8:
            start, end = now - rng.randint(1, 400) * 1000, now + 1000
            now = end
        else:
            start = now - rng.randint(1, 30) * 1000
            end = start + rng.randint(1, 100) * 1000
            now = max(now, end)
        span = tracer.start_span(f"s{i}", start_time=start)
        span.end(end_time=end)
        span._owner = rng.choice(owners)
        spans.append(span)
    return spans


@pytest.mark.parametrize("seed", range(12))
def test_the_writer_places_every_span_on_a_nesting_track_across_batches(
    tmp_path: Path, seed: int
) -> None:
    """Owners in any order, spans that swallow or cross earlier ones, batches past the
    intervals a track remembers: every span is written once, the spans of each track nest,
    and no primary track remembers more than its bound after a batch."""
    from asynctrace.export._chrome_writer import ChromeWriter

    rng = random.Random(seed)
    provider = FastTracerProvider()
    tracer = provider.get_tracer("tracks")
    owners = [_Owner(n) for n in range(rng.randint(1, 4))]
    writer = ChromeWriter(tmp_path / "t.jsonl", {}, itertools.count(1).__next__)
    most = writer._tracks.max_intervals
    written = 0
    for _ in range(rng.randint(2, 3)):
        batch = _batch(rng, tracer, owners, rng.randint(300, 1500))
        assert writer.export(batch) == (len(batch), 0)
        written += len(batch)
        assert all(len(t.starts) == len(t.ends) <= most for t in writer._tracks.primary.values())
    writer.shutdown()
    events = read_chrome_trace(tmp_path / "t.jsonl").complete_events()
    assert len(events) == written
    assert_tracks_nest(events)


@pytest.mark.parametrize("most", [1, 2, 3, 512])
def test_a_track_bounded_below_four_intervals_stops(most: int) -> None:
    """A bound a compaction cannot reach (three intervals stay three) ends; the rest hold."""
    from asynctrace.export._tracks import _Track

    track = _Track(1, "t")
    for i in range(1000):
        track.starts.append(2 * i)
        track.ends.append(2 * i + 1)
    track.bound(most)
    assert len(track.starts) == len(track.ends) <= max(most, 3)
