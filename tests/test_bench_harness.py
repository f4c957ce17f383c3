"""The benchmark harness's own logic, without running a benchmark.

``benchmarks/all.py`` runs over stand-in scripts in a temporary directory;
the benchmarks' helpers and the AReaL loader run in child processes, so their
``sys.path`` and module changes stay there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
TESTS = ROOT / "tests"


def child(code: str, *path: Path) -> subprocess.CompletedProcess[str]:
    """Run *code* in a fresh interpreter with *path* first on ``sys.path``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )


# -- benchmarks/all.py ---------------------------------------------------------


def _scripts() -> list[str]:
    done = child("import all; print('\\n'.join(all.SCRIPTS))", BENCHMARKS)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _run_all(tmp_path: Path, failing: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``all.py`` in *tmp_path* over stand-ins: each prints its name, and those in
    *failing* then run their code there."""
    shutil.copy(BENCHMARKS / "all.py", tmp_path / "all.py")
    for name in _scripts():
        body = f"print('ran', {name!r}, flush=True)\n" + failing.get(name, "")
        (tmp_path / name).write_text(f"import os, signal, sys\n{body}")
    return subprocess.run(
        [sys.executable, str(tmp_path / "all.py"), "--quick"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_all_fails_when_a_benchmark_is_killed_by_a_signal(tmp_path: Path) -> None:
    """A benchmark killed by a signal (a negative return code) fails the run, by name."""
    scripts = _scripts()
    killed = scripts[1]
    done = _run_all(tmp_path, {killed: "os.kill(os.getpid(), signal.SIGKILL)\n"})
    assert done.returncode == 1, done.stdout
    for name in scripts:  # every one still ran
        assert f"ran {name}" in done.stdout
    assert f"{killed}: killed by SIGKILL" in done.stdout
    assert f"1 of {len(scripts)} benchmarks failed" in done.stdout


def test_all_names_every_failed_benchmark_with_its_status(tmp_path: Path) -> None:
    scripts = _scripts()
    done = _run_all(
        tmp_path,
        {scripts[0]: "sys.exit(1)\n", scripts[-1]: "os.kill(os.getpid(), signal.SIGTERM)\n"},
    )
    assert done.returncode == 1, done.stdout
    assert f"{scripts[0]}: exit 1" in done.stdout
    assert f"{scripts[-1]}: killed by SIGTERM" in done.stdout
    assert f"2 of {len(scripts)} benchmarks failed" in done.stdout


def test_all_passes_when_every_benchmark_passes(tmp_path: Path) -> None:
    done = _run_all(tmp_path, {})
    assert done.returncode == 0, done.stdout
    assert "failed" not in done.stdout


def test_all_describes_a_signal_number_without_a_name() -> None:
    done = child("import all; print(all.describe(-200), '|', all.describe(2))", BENCHMARKS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "killed by signal 200 | exit 2"


# -- benchmarks/bench_demo.py --------------------------------------------------


def test_bench_demo_measures_the_demos_own_configuration(tmp_path: Path) -> None:
    """Telemetry "on" is the configuration the demo itself runs with, goodput included."""
    done = child(
        f"""
        import json
        from pathlib import Path
        import bench_demo
        from asynctrace_contrib.demo._config import demo_config
        out = Path({str(tmp_path)!r})
        print(json.dumps({{
            "bench": bench_demo.config("on", out, bench_demo.DEMO),
            "demo": demo_config(out, "all", [], dict(bench_demo.DEMO)),
            "off": bench_demo.config("off", out, bench_demo.DEMO),
            "threshold": bench_demo.flush_threshold(out, bench_demo.DEMO),
        }}))
        """,
        BENCHMARKS,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["bench"] == got["demo"]
    assert "goodput" in got["bench"]
    assert got["bench"]["exporters"] == ["chrome"]
    assert got["off"] == {"enabled": False, "output_dir": str(tmp_path)}
    assert got["threshold"] == got["demo"]["session_tracer"]["flush_threshold"]


# -- benchmarks/bench_provider.py ----------------------------------------------


def test_bench_provider_judges_a_ratio_as_it_prints_it() -> None:
    """A verdict never contradicts the figure it prints next to its bound."""
    done = child(
        """
        import json
        from bench_provider import figure, meets
        cases = [(1.5004, 1.5), (1.5006, 1.5), (1.4996, 1.5), (0.8, 0.8), (0.2004, 0.2)]
        print(json.dumps([[figure(r, b), meets(r, b)] for r, b in cases]))
        """,
        BENCHMARKS,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        ["1.5004", False],  # just past the bound: a miss, printed so it reads as one
        ["1.501", False],
        ["1.500", True],
        ["0.800", True],
        ["0.2004", False],
    ]


# -- tests/_areal_loader.py ----------------------------------------------------


def _fake_areal(root: Path, version: str) -> Path:
    """An ``areal`` package of *version*, tracer and converter included, under *root*."""
    package = root / "areal"
    (package / "utils").mkdir(parents=True)
    (package / "tools").mkdir()
    (package / "__init__.py").write_text("")
    (package / "utils" / "perf_tracer.py").write_text("VERSION = 'fake'\n")
    (package / "tools" / "perf_trace_converter.py").write_text("VERSION = 'fake'\n")
    info = root / f"areal-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: areal\nVersion: {version}\n")
    return root


@pytest.mark.parametrize("loader", ["load_perf_tracer()", "load_tool('perf_trace_converter')"])
def test_areal_loader_refuses_another_release(tmp_path: Path, loader: str) -> None:
    """Only AReaL 1.0.4 is the anchor: another installed release is refused by name."""
    site = _fake_areal(tmp_path, "9.9")
    done = child(
        f"""
        import _areal_loader
        try:
            module = _areal_loader.{loader}
        except _areal_loader.AnchorMissing as exc:
            print("AnchorMissing:", exc)
        else:
            print("loaded", module.__file__)
        """,
        site,
        TESTS,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("AnchorMissing: AReaL 9.9 is installed, not the anchor "), (
        done.stdout
    )
    assert "areal==1.0.4" in done.stdout


def test_areal_loader_loads_the_anchor_release(tmp_path: Path) -> None:
    """With the fake at 1.0.4 the version check lets it through (the wheel's files load)."""
    site = _fake_areal(tmp_path, "1.0.4")
    done = child(
        """
        import _areal_loader
        print(_areal_loader.load_tool("perf_trace_converter").VERSION)
        """,
        site,
        TESTS,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "fake"
