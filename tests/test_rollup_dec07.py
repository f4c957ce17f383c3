"""The rollup with span names that are not strings: counted under their text, as the
trace file writes them (the CLI and the live goodput agree)."""

from __future__ import annotations

from typing import Any

from _rollup_helpers import no_step_callbacks, span_event  # noqa: F401 (autouse)

from asynctrace._rollup import Rollup, StepRow


def test_names_that_are_not_strings_are_counted_under_their_text() -> None:
    rows: list[StepRow] = []
    rollup = Rollup(on_step=lambda row, _: rows.append(row), keep=False)
    names: list[Any] = [["rl", "generate"], {"leaf": 2}, 7]
    for i, name in enumerate(names):
        leaf = {"rl.iteration": 1, "rl.bucket": "productive"}
        rollup.add(span_event(name, 10 + i, 2, 100_000 * i, 50_000, **leaf))
    step = {"rl.iteration": 1, "asynctrace.group": "step"}
    rollup.add(span_event({"step": 1}, 2, None, 0, 1_000_000, **step))  # type: ignore[arg-type]
    result = rollup.finish()
    assert result.spans == 4
    assert [(row.name, row.sums[0]) for row in rows] == [("{'step': 1}", 150_000)]
