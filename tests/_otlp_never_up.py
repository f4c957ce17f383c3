"""A process exporting OTLP to a port where nothing ever listens (run by the outage tests).

It records spans, prints one JSON line with what ``flush(1.0)`` returned and
how long it took, and exits through the normal ``atexit`` shutdown
(``shutdown_timeout_s`` 1 s).
"""

from __future__ import annotations

import json
import time

import asynctrace as at

telemetry = at.configure(
    {
        "enabled": True,
        "exporters": ["otlp"],
        "span_groups": "all",
        "schedule_delay_millis": 50,
        "shutdown_timeout_s": 1.0,
    }
)
for _ in range(50):
    with at.umbrella_span("step", "rl.step"):
        pass
started = time.monotonic()
ok = telemetry.flush(1.0)
print(json.dumps({"flushed": ok, "seconds": time.monotonic() - started}), flush=True)
