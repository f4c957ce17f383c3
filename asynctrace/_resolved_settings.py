"""The validated, fully resolved configuration the runtime installs: :class:`Settings`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._config_fields import SpanExporterLike
from ._fast import Sampling, SpanLimits
from ._goodput_settings import GoodputSettings
from ._profiler_settings import ProfilerSettings
from ._session_config import SessionTracerConfig

__all__ = ["Settings"]


@dataclass(frozen=True)
class Settings:
    """A validated, fully resolved configuration (what the runtime installs).

    Built by :func:`resolve`; ``output_dir`` has ``{run_id}`` substituted and
    ``~`` expanded, and is ``None`` when nothing writes files.
    ``otlp_protocol`` is the OTLP transport of the spans (of the goodput
    metrics when only they use OTLP); ``otlp_metrics_protocol`` that of the
    goodput metrics (``OTEL_EXPORTER_OTLP_METRICS_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``otlp_protocol``).
    """

    enabled: bool
    span_groups: str
    exporters: tuple[str | SpanExporterLike, ...]
    output_dir: str | None
    service_name: str
    run_id: str
    session_tracer: SessionTracerConfig
    resource_attributes: Mapping[str, Any]
    handle_sigterm: bool
    max_queue_size: int
    max_export_batch_size: int
    schedule_delay_millis: float
    shutdown_timeout_s: float
    rank: int
    world_size: int
    local_rank: int | None
    role: str | None
    provider: Any = "fast"
    sampling: Sampling = dataclasses.field(default_factory=Sampling)
    span_limits: SpanLimits = dataclasses.field(default_factory=SpanLimits)
    propagate_scopes: bool = False
    loop_stall_threshold_ms: float = 50.0
    profiler: ProfilerSettings | None = None
    otlp_protocol: str = "http/protobuf"
    exporting: bool = True
    export_ranks: str = "all"
    retry_buffer_spans: int = 65_536
    retry_buffer_bytes: int = 64 << 20
    goodput: GoodputSettings | None = None
    otlp_metrics_protocol: str = "http/protobuf"

    @property
    def exporter_names(self) -> tuple[str, ...]:
        """Names of the built-in exporters requested (objects excluded)."""
        return tuple(e for e in self.exporters if isinstance(e, str))

    @property
    def chrome_filename(self) -> str:
        """``traces-r{rank}.jsonl``, or ``traces-{role}-r{rank}.jsonl`` for roles other
        than ``worker``."""
        if self.role in (None, "worker"):
            return f"traces-r{self.rank}.jsonl"
        return f"traces-{self.role}-r{self.rank}.jsonl"
