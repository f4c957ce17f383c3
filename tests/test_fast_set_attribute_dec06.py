"""The fast provider's ``set_attribute`` keeps what the SDK's span keeps and counts what it
drops, under any attribute count limit."""

from __future__ import annotations

import random
from typing import Any

import pytest
from opentelemetry.sdk.trace import SpanLimits as SdkLimits
from opentelemetry.sdk.trace import TracerProvider as SdkProvider

from asynctrace._fast import FastTracerProvider, SpanLimits

_KEYS = ["a", "b", "c", "d", "e", ""]  # (no stamp key: past the limit, stamps are kept)
_VALUES: list[Any] = [1, "x", True, 2.5, float("nan"), [1, 2], ("t",), {"k": 1}, None]


@pytest.mark.parametrize("limit", [None, 0, 1, 2, 3, 5])
def test_set_attribute_keeps_what_the_sdk_keeps_and_counts_what_it_drops(
    limit: int | None,
) -> None:
    """Random keys (new, set again, empty) and values (floats and NaN, lists,
    mappings, None) set one by one: the fast span ends with the SDK span's attributes,
    in its order, and the same dropped count, under every attribute count limit."""
    rng = random.Random(f"limit {limit}")  # (None too: a replayable seed)
    sdk = SdkProvider(span_limits=SdkLimits(max_attributes=limit)).get_tracer("sdk")
    fast = FastTracerProvider(limits=SpanLimits(max_attributes=limit)).get_tracer("asynctrace")
    for _ in range(200):
        calls = [(rng.choice(_KEYS), rng.choice(_VALUES)) for _ in range(rng.randint(1, 9))]
        ours, theirs = fast.start_span("s"), sdk.start_span("s")
        for key, value in calls:
            ours.set_attribute(key, value)
            theirs.set_attribute(key, value)
        ours.end()
        theirs.end()
        assert list(_comparable(ours.attributes)) == list(_comparable(theirs.attributes)), calls
        assert ours._dropped == theirs.dropped_attributes, calls  # (what the exporters read)


def _comparable(attributes: Any) -> Any:
    """``(key, value)`` pairs with NaN as a marker (NaN equals nothing) and sequences as
    tuples."""
    for key, value in attributes.items():
        if isinstance(value, float) and value != value:
            value = "NaN"
        elif isinstance(value, list | tuple):
            value = tuple(value)
        yield key, value
