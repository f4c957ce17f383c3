"""Resource attributes of the environment a job runs in: SLURM, Kubernetes, Ray, torchrun.

Read from environment variables only (and, for Ray, from the runtime context
of a Ray that this process already imported and started): no subprocess, no
file, no network, so it costs microseconds at setup. ``OTEL_RESOURCE_ATTRIBUTES``
wins over everything found here.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["detect_resource"]

_SLURM = {
    "SLURM_JOB_ID": "slurm.job.id",
    "SLURM_JOB_NAME": "slurm.job.name",
    "SLURM_PROCID": "slurm.procid",
    "SLURM_LOCALID": "slurm.localid",
    "SLURM_NODEID": "slurm.nodeid",
    "SLURM_NTASKS": "slurm.ntasks",
    "SLURM_ARRAY_JOB_ID": "slurm.array.job.id",
    "SLURM_ARRAY_TASK_ID": "slurm.array.task.id",
}
_SLURM_NODELIST = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")

# The Kubernetes downward API has no fixed variable names; these are the usual ones.
_K8S = {
    "k8s.pod.name": ("K8S_POD_NAME", "POD_NAME", "KUBERNETES_POD_NAME"),
    "k8s.namespace.name": ("K8S_NAMESPACE_NAME", "K8S_POD_NAMESPACE", "POD_NAMESPACE"),
    "k8s.node.name": ("K8S_NODE_NAME", "NODE_NAME", "KUBERNETES_NODE_NAME"),
    "k8s.pod.uid": ("K8S_POD_UID", "POD_UID"),
    "k8s.container.name": ("K8S_CONTAINER_NAME", "CONTAINER_NAME"),
}

_TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "torchrun.run_id",
    "GROUP_RANK": "torchrun.group_rank",
    "LOCAL_WORLD_SIZE": "torchrun.local_world_size",
    "TORCHELASTIC_RESTART_COUNT": "torchrun.restart_count",
}

_INTS = frozenset(
    {
        "slurm.procid",
        "slurm.localid",
        "slurm.nodeid",
        "slurm.ntasks",
        "torchrun.group_rank",
        "torchrun.local_world_size",
        "torchrun.restart_count",
    }
)


def _typed(key: str, raw: str) -> Any:
    if key in _INTS:
        try:
            return int(raw)
        except ValueError:
            return raw
    return raw


def detect_resource(environ: Mapping[str, str]) -> dict[str, Any]:
    """The resource attributes *environ* (and a running Ray) says about this process.

    Example:
        >>> detect_resource({"SLURM_JOB_ID": "4711", "SLURM_PROCID": "3"})
        {'slurm.job.id': '4711', 'slurm.procid': 3}
    """
    found: dict[str, Any] = {}
    for var, key in _SLURM.items():
        raw = environ.get(var, "").strip()
        if raw:
            found[key] = _typed(key, raw)
    for var in _SLURM_NODELIST:
        raw = environ.get(var, "").strip()
        if raw:
            found["slurm.job.nodelist"] = raw
            break
    in_cluster = bool(environ.get("KUBERNETES_SERVICE_HOST", "").strip())
    for key, names in _K8S.items():
        for var in names:
            if not in_cluster and not var.startswith("K8S_"):
                continue  # POD_NAME and the like mean Kubernetes only inside a cluster
            raw = environ.get(var, "").strip()
            if raw:
                found[key] = raw
                break
    if in_cluster and "k8s.pod.name" not in found:
        hostname = environ.get("HOSTNAME", "").strip()
        if hostname:
            found["k8s.pod.name"] = hostname  # a pod's hostname is its name
    if "TORCHELASTIC_RUN_ID" in environ or "LOCAL_WORLD_SIZE" in environ:
        for var, key in _TORCHRUN.items():
            raw = environ.get(var, "").strip()
            if raw:
                found[key] = _typed(key, raw)
    found.update(_ray())
    return found


def _ray() -> dict[str, Any]:
    """Job, node and actor ids of a Ray this process already started (never imports Ray)."""
    ray = sys.modules.get("ray")
    if ray is None:
        return {}
    try:
        if not ray.is_initialized():
            return {}
        context = ray.get_runtime_context()
        found: dict[str, Any] = {"ray.job.id": str(context.get_job_id())}
        node_id = context.get_node_id()
        if node_id:
            found["ray.node.id"] = str(node_id)
        actor_id = context.get_actor_id()
        if actor_id:
            found["ray.actor.id"] = str(actor_id)
        return found
    except Exception:  # an old or partial Ray: nothing to say
        return {}
