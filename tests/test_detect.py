"""Resource detection from the job's environment: SLURM, Kubernetes, torchrun; OTEL wins."""

from __future__ import annotations

import subprocess
import time

import pytest

import asynctrace as at
from asynctrace._detect import detect_resource

JOB = {
    "SLURM_JOB_ID": "4711",
    "SLURM_JOB_NAME": "grpo",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_JOB_NODELIST": "gpu[01-04]",
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
    "POD_NAME": "trainer-3",
    "POD_NAMESPACE": "rl",
    "NODE_NAME": "node-7",
    "TORCHELASTIC_RUN_ID": "abc",
    "GROUP_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "LOCAL_RANK": "1",
}


def test_each_environment_is_detected() -> None:
    """SLURM, Kubernetes downward-API and torchrun variables become resource attributes."""
    found = detect_resource(JOB)
    assert found == {
        "slurm.job.id": "4711",
        "slurm.job.name": "grpo",
        "slurm.procid": 3,
        "slurm.localid": 1,
        "slurm.job.nodelist": "gpu[01-04]",
        "k8s.pod.name": "trainer-3",
        "k8s.namespace.name": "rl",
        "k8s.node.name": "node-7",
        "torchrun.run_id": "abc",
        "torchrun.group_rank": 1,
        "torchrun.local_world_size": 2,
    }


def test_generic_names_count_only_inside_a_cluster() -> None:
    """POD_NAME outside Kubernetes is someone else's variable; K8S_* always counts."""
    assert detect_resource({"POD_NAME": "x", "HOSTNAME": "laptop"}) == {}
    assert detect_resource({"K8S_POD_NAME": "x"}) == {"k8s.pod.name": "x"}
    assert detect_resource({"KUBERNETES_SERVICE_HOST": "h", "HOSTNAME": "pod-1"}) == {
        "k8s.pod.name": "pod-1"
    }


def test_otel_resource_attributes_win_over_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_RESOURCE_ATTRIBUTES beats what is detected; both reach the exported resource."""
    for key, value in JOB.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "slurm.job.id=override,team=rl")
    telemetry = at.configure(
        {"enabled": True, "exporters": ["memory"], "span_groups": "all"}, rank=3, world_size=4
    )
    try:
        with at.umbrella_span("step", "rl.step"):
            pass
        (span,) = telemetry.memory_exporter.get_finished_spans()  # type: ignore[union-attr]
        resource = span.resource.attributes
        assert resource["slurm.job.id"] == "override"
        assert resource["team"] == "rl"
        assert resource["k8s.pod.name"] == "trainer-3"
        assert resource["slurm.procid"] == 3
        assert resource["asynctrace.rank"] == 3
        assert resource["asynctrace.local_rank"] == 1
    finally:
        at.shutdown()


def test_detection_is_fast_and_starts_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Detection reads variables only: no subprocess, microseconds."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a subprocess at setup")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    started = time.perf_counter()
    for _ in range(100):
        detect_resource(JOB)
    assert (time.perf_counter() - started) / 100 < 0.001
