"""``asynctrace groups``: registered groups, buckets, presets, spec resolution."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import asynctrace

from ._helpers import Result, one_line

Run = Callable[..., Result]


def _row(out: str, name: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.split()[:1] == [name])


def test_lists_groups_and_presets(run: Run) -> None:
    """Every registered group with its bucket, kind and per-item flag; then the presets."""
    result = run("groups")
    assert result.code == 0
    assert result.err == ""
    for name in asynctrace.registered_span_groups():
        assert _row(result.out, name)
    assert _row(result.out, "generation")[:3] == ["generation", "productive", "leaf"]
    assert _row(result.out, "checkpoint")[:3] == ["checkpoint", "overhead", "leaf"]
    assert _row(result.out, "step")[:3] == ["step", "-", "umbrella"]
    assert _row(result.out, "per_prompt")[:4] == ["per_prompt", "-", "umbrella", "yes"]
    assert _row(result.out, "efficiency")[:4] == ["efficiency", "by", "category", "leaf"]
    assert "presets (" in result.out
    assert " ".join(_row(result.out, "default")) == (
        "default checkpoint, evaluate, job, model_init, setup"
    )


def test_selected_names(run: Run) -> None:
    """Named groups and presets only."""
    result = run("groups", "reward", "PER_STEP")
    assert result.code == 0
    assert "groups (1):" in result.out
    assert "presets (1):" in result.out
    assert "per_prompt" not in _row(result.out, "per_step")


def test_resolve(run: Run) -> None:
    """--resolve prints what a spec enables (case and spaces do not matter)."""
    result = run("groups", "--resolve", " Default , generation")
    assert result.code == 0
    assert result.out.splitlines()[0] == "' Default , generation' enables 6 groups:"
    names = [line.split()[0] for line in result.out.splitlines()[2:]]
    assert names == sorted(asynctrace.resolve_span_groups("default,generation"))


def test_json(run: Run) -> None:
    """--json for the listing and for --resolve."""
    listing = run("groups", "--json").json()
    groups = {g["name"]: g for g in listing["groups"]}
    assert groups["policy_update"] == {
        "name": "policy_update",
        "bucket": "productive",
        "umbrella": False,
        "per_item": False,
        "description": "optimizer/training steps",
    }
    assert groups["efficiency"]["bucket"] == "by_category"
    assert listing["presets"]["default"] == [
        "checkpoint",
        "evaluate",
        "job",
        "model_init",
        "setup",
    ]
    resolved = run("groups", "--resolve", "job", "--json").json()
    assert resolved["spec"] == "job"
    assert [g["name"] for g in resolved["groups"]] == ["job"]


def test_unknown_names_exit_2_with_the_known_list(run: Run) -> None:
    """An unknown name, listed or in a spec: one line with the known names, exit 2."""
    listed = run("groups", "generation", "bogus")
    assert listed.code == 2
    line = one_line(listed.err)
    assert line.startswith("asynctrace groups: error: unknown group or preset name 'bogus'")
    presets = re.search(r"known presets: ([^;]*)", line)
    assert presets is not None, line
    # the built-in presets (a library imported by another test may have added its own)
    assert {"all", "default", "per_step"} <= set(presets.group(1).split(", "))
    assert "generation" in line
    resolved = run("groups", "--resolve", "default,bogus")
    assert resolved.code == 2
    line = one_line(resolved.err)
    assert "unknown name 'bogus'" in line
    assert "known groups:" in line
    subtraction = run("groups", "--resolve", "per_step,-job")
    assert subtraction.code == 2
    assert "no subtraction syntax" in one_line(subtraction.err)


def test_import_registers_a_library(tmp_path: Path) -> None:
    """--import MODULE lists the groups that module registers (and fails in one line)."""
    (tmp_path / "mytrainer_groups.py").write_text(
        "import asynctrace\n"
        "asynctrace.register_span_groups('mytrainer', {'tokenize': asynctrace.Bucket.OVERHEAD},\n"
        "    presets={'mytrainer_basic': ['default', 'tokenize']})\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    command = [sys.executable, "-m", "asynctrace", "groups", "--import", "mytrainer_groups"]
    done = subprocess.run(
        [*command, "tokenize", "mytrainer_basic"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert _row(done.stdout, "tokenize")[:3] == ["tokenize", "overhead", "leaf"]
    assert "tokenize" in _row(done.stdout, "mytrainer_basic")[1:][-1]
    broken = subprocess.run(
        [sys.executable, "-m", "asynctrace", "groups", "--import", "no_such_module_here"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert broken.returncode == 2
    assert one_line(broken.stderr).startswith(
        "asynctrace groups: error: --import no_such_module_here: ModuleNotFoundError"
    )


def test_help_has_an_example(run: Run) -> None:
    """--help exits 0 and shows examples, for the command and every subcommand."""
    for argv in (["--help"], ["groups", "--help"], ["report", "--help"]):
        result = run(*argv)
        assert result.code == 0
        assert "examples:" in result.out


def test_no_command(run: Run) -> None:
    """No subcommand: help on stderr, exit 2; an unknown one is a one-line error."""
    assert run().code == 2
    unknown = run("frobnicate")
    assert unknown.code == 2
    assert "invalid choice: 'frobnicate'" in one_line(unknown.err)


def test_resolve_refuses_names(run: Run) -> None:
    """NAME arguments with --resolve are a usage error, not silently ignored."""
    result = run("groups", "step", "--resolve", "default")
    assert result.code == 2
    assert result.out == ""
    assert one_line(result.err) == (
        "asynctrace groups: error: NAME arguments (step) and --resolve cannot be combined: "
        "--resolve lists what its SPEC enables (see 'asynctrace groups --help')"
    )
