"""Attribute names asynctrace stamps on spans."""

from __future__ import annotations

RL_BUCKET = "rl.bucket"
RL_ITERATION = "rl.iteration"
RL_EFFICIENCY_CATEGORY = "rl.efficiency.category"
RL_IDLE_POLLS = "rl.idle.polls"
CANCELLED = "asynctrace.cancelled"
TRUNCATED = "asynctrace.truncated"
GROUP = "asynctrace.group"
RL_TASK_ID = "rl.task_id"
RL_SESSION_ID = "rl.session_id"
