"""The one entry point for checks: tests, lint, typing, docs, bench."""

from __future__ import annotations

import json
import os

import nox

# uv when it is installed (`pip install 'nox[uv]'`): environments in seconds; else venv + pip.
nox.options.default_venv_backend = "uv|venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "ray", "lint", "typing"]

PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
TEST_DEPS = [
    "pytest>=8",
    "hypothesis>=6.100",
    "trio>=0.25",
    "anyio>=4.4",
    "uvicorn>=0.30",
    "websockets>=12",
    "selenium>=4.10",  # drives Debian's chromium for the HTML report test
    # a third-party instrumentation recording through asynctrace's providers (interop tests)
    "opentelemetry-instrumentation-aiohttp-client",
    "opentelemetry-instrumentation-fastapi",  # one SERVER span next to OpenTelemetry's ASGI one
    "pytest-xdist>=3.5",  # the suite runs on every core (-n auto)
    "cloudpickle>=3",  # how Ray, loky and Dask send a function defined in __main__: by value
    "viztracer>=1.0",  # the python profiler backend, run for real
    # the tests' OTLP receiver (both transports) and the otlp-grpc extra's exporter
    "grpcio>=1.60",
    "opentelemetry-proto",
    "opentelemetry-exporter-otlp-proto-grpc",
    "pexpect>=4.8",  # asynctrace watch in a real pty
    # nemo-lens's released code, for the migration tests (it needs Python >= 3.13)
    "nemo-lens==0.1.0; python_version >= '3.13'",
]


def install(session: nox.Session, *args: str) -> None:
    """``session.install``, from uv's cache alone when it holds every package.

    uv asks the package index again about every cached package, about 8 s a
    session here against 2 s from the cache (which then resolves among the
    versions it holds); a session whose packages are not all cached (a new
    machine, a new Python) installs from the index as usual.
    """
    if session.venv_backend == "uv":
        try:
            session.install("--offline", *args, silent=True)
            return
        except nox.command.CommandFailed:
            session.log("not everything is in uv's cache: installing from the package index")
    session.install(*args, silent=False)


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the test suite, two workers per core (strict mode: hot-path failures re-raise).

    On every Python on the fast provider (the default); on 3.11 the core,
    boundary, session, export and contrib tests run a second time on the SDK
    provider (``ASYNCTRACE_PROVIDER=sdk``: ``configure`` and ``capture_spans``
    then build SDK pipelines; see PROVIDER_INDEPENDENT for what is left out).
    Property tests run with small budgets here; ``nox -s fuzz`` runs them with
    large ones.
    """
    # AReaL 1.0.4's tracer and tools for the migration tests: the wheel without its
    # training stack (tests/_areal_loader.py loads them), and what they import.
    areal_imports = ("orjson", "colorlog", "numpy", "pandas", "plotly")
    install(
        session,
        "-e",
        ".[sdk,otlp,uvloop,aiohttp,fastapi,cli,prometheus]",
        *TEST_DEPS,
        *areal_imports,
    )
    if session.python in ("3.11", "3.12"):  # areal 1.0.4 requires Python >= 3.11, < 3.13
        install(session, "--no-deps", "areal==1.0.4")
    env = {
        "ASYNCTRACE_STRICT": "1",
        "PYTHONWARNINGS": os.environ.get("PYTHONWARNINGS", ""),
        # The suite starts hundreds of Python processes (workers, children, demos);
        # with bytecode caches off, each one would compile everything it imports again.
        "PYTHONDONTWRITEBYTECODE": None,
    }
    # The soak tests (tests/soak, marked soak) run in their own session: nox -s soak.
    # The docs' programs and the Quick start in a fresh environment print the same on
    # every Python: they run on the default one (3.11) only.
    once = [] if session.python == "3.11" else [f"--ignore={path}" for path in ONCE]
    _warm_bytecode(session, env)
    session.run("pytest", *XDIST, "-m", "not soak", *once, *session.posargs, env=env)
    if session.python == "3.11" and not session.posargs:
        sdk = [f"--ignore={path}" for path in (*ONCE, *PROVIDER_INDEPENDENT)]
        sdk += [f"--deselect={test}" for test in PROVIDER_INDEPENDENT_TESTS]
        session.run(
            "pytest",
            *XDIST,
            "-q",
            "-m",
            "not soak",
            *sdk,
            env={**env, "ASYNCTRACE_PROVIDER": "sdk"},
        )


def _warm_bytecode(session: nox.Session, env: dict[str, str | None]) -> None:
    """In a new environment, one process imports what the tests import, once.

    Collecting the suite compiles the bytecode of every module the tests import
    and of the rewritten test modules; otherwise each of the four workers and
    the tests' child processes compile them for themselves. In a new 3.12
    environment: 87 s and 157 s of CPU for the session without this, 70 s
    and 117 s with it (a reused environment: 65 s and 123 s). A marker in
    the environment skips it there.
    """
    location = getattr(session.virtualenv, "location", None)
    if not location:  # no environment of its own (nox --no-venv)
        return
    marker = os.path.join(location, ".asynctrace-bytecode")
    if os.path.exists(marker):
        return
    session.log("a new environment: compiling what the tests import, once (about 10 s)")
    session.run("pytest", "--collect-only", "-q", "-m", "not soak", env=env, silent=True)
    with open(marker, "w", encoding="utf-8") as out:
        out.write("the suite's imports were compiled here\n")


# Two pytest workers per core: about a third of the suite's wall time is spent
# waiting (real outages, timeouts, subprocesses, servers on 127.0.0.1), and a
# waiting worker needs no core. Timing checks measure their own thread's CPU
# time or bound what a wait would cost, so they hold under that load.
WORKERS = str(min(8, 2 * (os.cpu_count() or 1)))
# Work stealing: each worker starts on a quarter of the tests in collection order
# (slow-marked first, see tests/conftest.py) and an idle one takes half of a busy one's
# queue, so the slow tests spread out early and each module's fixtures mostly stay on
# one worker (handing tests out one at a time made module fixtures run once per worker:
# 82 s against 64 s for one session).
XDIST = ("-n", WORKERS, "--dist", "worksteal")
# Run on the default Python only (what they check does not depend on the version:
# the docs' programs, the Quick start in a fresh environment, and the id generator,
# 10^6 ids over 8 processes, which is os.urandom and a fork hook on every version).
ONCE = ("tests/test_docs.py", "tests/test_quickstart.py", "tests/test_ids.py")
# Left out of the SDK-provider pass: tests that choose their providers themselves
# (parametrized over both, or about one of them), and code that no provider reaches
# (the command line, configuration parsing, the OTLP retry buffer, redaction, detection).
PROVIDER_INDEPENDENT = (
    "tests/cli",
    "tests/test_conformance.py",
    "tests/test_limits.py",
    "tests/test_interop.py",
    "tests/test_stalls.py",
    "tests/test_ids.py",
    "tests/test_fast_provider.py",
    "tests/test_config.py",
    "tests/test_public_api.py",
    "tests/test_group_audit.py",
    "tests/test_hostile_inputs.py",
    "tests/test_redact.py",
    "tests/test_detect.py",
    "tests/export/test_otlp_delivery.py",
    "tests/export/test_otlp_wire.py",  # the encoder of the fast provider's spans, made by hand
    # each test names its provider itself
    "tests/test_fast_edges5.py",
    "tests/test_fast_set_attribute_dec06.py",
    "tests/test_context_edges5.py",
    "tests/export/test_chrome_tracks_dec06.py",
)
# Single tests of modules that otherwise run on both: what they check is read from
# files or parsed from carriers, whichever provider recorded the spans around it; made
# without spans; or recorded on the providers the test names itself.
PROVIDER_INDEPENDENT_TESTS = (
    "tests/contrib/test_areal.py::test_areal_plot_tool_reads_the_sessions",  # session records
    "tests/test_propagation.py::test_fuzz_carriers_never_raise_never_attach_invalid",
    "tests/export/test_chrome.py::test_track_assigner_always_nests",  # intervals, no spans
    # the session tracer alone: sessions, phases and events, no span started
    "tests/test_sessions.py::test_threads_and_tasks_write_every_session_exactly_once",
    "tests/test_sessions.py::test_memory_stays_flat",
    # parametrized over both providers
    "tests/test_goodput.py::test_generated_trace_live_equals_offline",
    "tests/test_goodput.py::test_demo_live_equals_offline",
    "tests/test_goodput.py::test_on_the_fast_provider_the_rollup_rides_on_the_chrome_writer",
)


@nox.session(python="3.11")
def fuzz(session: nox.Session) -> None:
    """The property tests (marked ``fuzz``) with their fuzz budgets: <= 5 minutes on 2 cores.

    Each target runs on tests/_fuzz.py's driver: examples drawn by Hypothesis's
    generator from the test's own strategies, no search engine; a failure is
    shrunk by the engine. A target stops at its budget or after 18 s, whichever
    comes first. ``nox -s fuzz -- 100000`` gives every target 100,000 examples
    instead, without a time limit (``ASYNCTRACE_FUZZ_EXAMPLES``, see
    tests/_budget.py); other arguments go to pytest. Each target's examples,
    time and examples/s are listed at the end.
    """
    install(session, "-e", ".[sdk,otlp,uvloop,aiohttp,fastapi,cli,prometheus]", *TEST_DEPS)
    args = list(session.posargs)
    report = os.path.join(session.create_tmp(), "fuzz-report.jsonl")
    open(report, "w").close()
    env = {"ASYNCTRACE_STRICT": "1", "ASYNCTRACE_FUZZ": "1", "ASYNCTRACE_FUZZ_REPORT": report}
    if args and args[0].isdigit():
        env["ASYNCTRACE_FUZZ_EXAMPLES"] = args.pop(0)
    else:
        # 23 targets on two workers: at most about 4 minutes of tests on a loaded machine.
        env["ASYNCTRACE_FUZZ_SECONDS"] = "18"
    try:
        session.run(
            "pytest",
            "-n",
            "auto",
            "--dist",
            "worksteal",  # targets take 1 to 18 s: an idle worker takes over queued ones
            "-m",
            "fuzz",
            "--durations=40",
            *args,
            env=env,
        )
    finally:
        _fuzz_table(session, report)


def _fuzz_table(session: nox.Session, report: str) -> None:
    """Print each finished target's examples, seconds and examples/s (tests/_fuzz.py's report)."""
    with open(report, encoding="utf-8") as lines:
        rows = sorted((json.loads(line) for line in lines), key=lambda row: row["target"])
    examples = sum(row["examples"] for row in rows)
    seconds = sum(row["seconds"] for row in rows)
    stopped = sum(row["examples"] < row["budget"] for row in rows)
    session.log(f"{'target':<100} {'examples':>9} {'s':>7} {'ex/s':>6}")
    for row in rows:
        rate = row["examples"] / max(row["seconds"], 1e-9)
        target = row["target"].removeprefix("tests/")
        mark = " (time limit)" if row["examples"] < row["budget"] else ""
        session.log(
            f"{target:<100} {row['examples']:>9,} {row['seconds']:>7.1f} {rate:>6,.0f}{mark}"
        )
    session.log(
        f"{len(rows)} targets, {examples:,} examples in {seconds:,.0f} s of worker time;"
        f" {stopped} stopped at the time limit before their budget"
    )


@nox.session(python="3.11")
def soak(session: nox.Session) -> None:
    """Load, volume, busy-loop, signal and chaos soaks (tests/soak); about 3 minutes by default.

    ``nox -s soak -- full`` runs them at the length docs/reliability.md
    reports (1,000,000 spans, 200 SIGTERM runs, 8 rounds of the chaotic
    demo); ``-- 2`` (any number) scales the default length.
    """
    install(session, "-e", ".[sdk,uvloop,demo]", "pytest>=8", "anyio>=4.4", "trio>=0.25")
    args = list(session.posargs)
    scale = "1"
    if args and (args[0] == "full" or args[0].replace(".", "", 1).isdigit()):
        scale = "4" if args[0] == "full" else args[0]
        args = args[1:]
    env = {"ASYNCTRACE_STRICT": "1", "ASYNCTRACE_SOAK_SCALE": scale}
    session.run("pytest", "-m", "soak", "-s", "-q", "tests/soak", *args, env=env)


@nox.session(python="3.11")
def ray(session: nox.Session) -> None:
    """The Ray boundary test on a real local cluster (ray.init(num_cpus=2))."""
    install(session, "-e", ".[sdk]", "ray>=2.9", *TEST_DEPS)
    session.run(
        "pytest",
        "tests/test_ray.py",
        *session.posargs,
        env={"ASYNCTRACE_STRICT": "1", "RAY_USAGE_STATS_ENABLED": "0"},
    )


@nox.session(python="3.11", venv_backend="venv")
def torch(session: nox.Session) -> None:
    """The torch profiler backend for real, on CPU.

    Installs ``ASYNCTRACE_TORCH_REQUIREMENT`` (default ``torch``) with pip, so the
    machine's pip configuration applies: on a machine whose index serves CUDA builds,
    name a CPU one (``torch==2.13.0+cpu`` from a wheel directory, or
    ``torch --index-url https://download.pytorch.org/whl/cpu``).
    """
    requirement = os.environ.get("ASYNCTRACE_TORCH_REQUIREMENT", "torch")
    session.install("-e", ".[sdk,cli,profile]", "pytest>=8", "numpy", silent=False)
    session.install(*requirement.split(), silent=False)
    session.run(
        "pytest",
        "tests/test_profiling.py",
        *session.posargs,
        env={"ASYNCTRACE_STRICT": "1"},
    )


@nox.session(python="3.11")
def demo(session: nox.Session) -> None:
    """Run the rollout-pump demo; prints where its trace, report and goodput table are."""
    session.install("-e", ".[demo]", silent=False)
    session.run("asynctrace", "demo", *session.posargs)


@nox.session(python="3.11")
def cli(session: nox.Session) -> None:
    """The asynctrace command, from its own environment: nox -s cli -- goodput DIR."""
    session.install("-e", ".[cli,sdk]", silent=False)
    session.run("asynctrace", *(session.posargs or ["--help"]))


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    install(session, "ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python="3.11")
def typing(session: nox.Session) -> None:
    """mypy --strict on the package."""
    install(
        session,
        "-e",
        ".[sdk,otlp,otlp-grpc,aiohttp,fastapi,demo,cli,prometheus]",
        "mypy>=1.10",
        "pytest>=8",
    )
    session.run("mypy", "--strict")


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """Build the documentation with mkdocs --strict."""
    session.install("mkdocs-material>=9.5")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site")


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """Side-by-side benchmarks; prints ratios and fails if a target is missed."""
    session.install(
        "-e",
        ".[sdk,otlp,otlp-grpc,aiohttp,fastapi,profile,prometheus]",
        "uvicorn>=0.30",
        # OpenTelemetry's own instrumentations, measured in the same run:
        "opentelemetry-instrumentation-aiohttp-client",
        "opentelemetry-instrumentation-fastapi",
    )
    # AReaL's released tracer, the anchor of bench_provider.py, without its
    # training stack (benchmarks/_areal.py loads just the tracer).
    session.install("--no-deps", "areal==1.0.4", "orjson", "colorlog")
    session.run("python", "benchmarks/all.py", *session.posargs)
