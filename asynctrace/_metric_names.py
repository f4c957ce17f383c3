"""Leaf-span histogram names, and the series each name ends in for every reader."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["metric_key", "span_metric_name"]

_INVALID = re.compile(r"[^A-Za-z0-9_./\-]")
_PROMETHEUS_RUN = re.compile(r"[^A-Za-z0-9:]+")  # what the Prometheus exporter makes one "_"
RESERVED_PREFIX: Final = "span."
# The built-in instruments' names, as metric_key() gives them.
_BUILT_IN: Final = frozenset({"rl_goodput", "rl_bucket_duration", "rl_step_duration"})


def span_metric_name(name: str) -> str:
    """The instrument name of a leaf span's histogram: the span's own name, when valid.

    OpenTelemetry instrument names are ASCII letters, digits and ``_ . / -``,
    start with a letter and have at most 255 characters; other characters
    become ``_``, and a name not starting with a letter gets ``span.`` before it.
    A name that would meet a built-in instrument (``rl.step.duration``,
    ``rl.goodput``, ``rl.bucket.duration``, in any case or spelling that
    :func:`metric_key` takes for the same) gets ``span.`` before it too.

    Example:
        >>> span_metric_name("rl.policy_update"), span_metric_name("2 phase")
        ('rl.policy_update', 'span.2_phase')
        >>> span_metric_name("rl.step.duration")
        'span.rl.step.duration'
    """
    clean = _INVALID.sub("_", name)
    if not clean[:1].isascii() or not clean[:1].isalpha():
        clean = RESERVED_PREFIX + clean
    clean = clean[:255]
    if metric_key(clean) in _BUILT_IN:
        clean = (RESERVED_PREFIX + clean)[:255]
    return clean


def metric_key(instrument_name: str) -> str:
    """The series an instrument of this name (unit ``s``) ends in, for every reader.

    OpenTelemetry takes instrument names without case; the Prometheus
    exporter makes each run of characters other than letters, digits and
    ``:`` one ``_``, and adds ``_seconds`` unless the name ends with it.
    Leaf names of one key share one histogram, so no reader sees a family
    twice.

    Example:
        >>> metric_key("RL.Phase"), metric_key("rl-phase_seconds")
        ('rl_phase', 'rl_phase')
    """
    key = _PROMETHEUS_RUN.sub("_", instrument_name).lower()
    return key[: -len("_seconds")] if key.endswith("_seconds") else key
