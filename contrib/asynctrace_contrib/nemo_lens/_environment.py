"""What :func:`setup_telemetry` reads besides the config: ``ASYNCTRACE_*``, gRPC, the resource."""

from __future__ import annotations

import importlib
import os
from typing import Any, Final

import asynctrace

from ._config import NemoLensConfig

__all__ = ["environment_base", "have_grpc_exporter", "lens_resource"]

# ASYNCTRACE_* variables the lens config decides instead (lens's own variables set them).
_LENS_DECIDES: Final = frozenset(
    {
        "ASYNCTRACE_ENABLED",
        "ASYNCTRACE_SPAN_GROUPS",
        "ASYNCTRACE_EXPORTERS",
        "ASYNCTRACE_SERVICE_NAME",
        "ASYNCTRACE_RUN_ID",
        "ASYNCTRACE_EXPORT_RANKS",
    }
)


def environment_base() -> asynctrace.TelemetryConfig:
    """asynctrace's own settings from its ``ASYNCTRACE_*`` variables, except those the lens
    config decides (enabled, groups, exporters, service name, run id, export ranks).

    So ``ASYNCTRACE_PROPAGATE_SCOPES=1``, ``ASYNCTRACE_OTLP_PROTOCOL``,
    ``ASYNCTRACE_RESOURCE_ATTRIBUTES`` or the queue sizes apply to a ported
    script as they do to an asynctrace one.

    Raises:
        asynctrace.ConfigurationError: a malformed variable, naming it.
    """
    environ = {
        name: value
        for name, value in os.environ.items()
        if name.startswith("ASYNCTRACE_") and name not in _LENS_DECIDES
    }
    return asynctrace.TelemetryConfig.from_env(environ)


def have_grpc_exporter() -> bool:
    """Whether OpenTelemetry's OTLP/gRPC trace exporter imports (lens tries the import and
    falls back to HTTP when it fails: a missing package, or a ``grpcio`` that will not
    load on this host)."""
    try:
        importlib.import_module("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
    except Exception:  # ImportError, or whatever a broken grpcio raises as it loads
        return False
    return True


def lens_resource(config: NemoLensConfig, rank: int, world_size: int) -> dict[str, Any]:
    """The resource attributes lens sets (its ``providers.py``), from *config*."""
    attributes: dict[str, Any] = {"dl.rank": rank, "dl.world_size": world_size}
    if config.run_id:
        attributes["nemo.run.id"] = config.run_id
        attributes["service.instance.id"] = f"{config.run_id}-rank{rank}"
    if config.user:
        attributes["nemo.user.id"] = config.user
    if config.wandb_entity:
        attributes["wandb.entity"] = config.wandb_entity
    if config.wandb_project:
        attributes["wandb.project"] = config.wandb_project
    environment = os.environ.get("DEPLOYMENT_ENV", os.environ.get("ENVIRONMENT", ""))
    if environment:
        attributes["deployment.environment"] = environment
    return attributes
