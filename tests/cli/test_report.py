"""``asynctrace report``: one self-contained, escaped HTML file, checked in a real browser."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._helpers import GOLDEN, VIOLATIONS, Result, one_line

Run = Callable[..., Result]
SCRIPT_NAME = "<script>alert(1)</script>"


def _report(run: Run, tmp_path: Path, *inputs: object, code: int = 0) -> tuple[str, Result]:
    out = tmp_path / "report.html"
    result = run("report", *inputs, "-o", out)
    assert result.code == code, result.err
    return out.read_text(encoding="utf-8"), result


def test_sections_and_summary(run: Run, tmp_path: Path) -> None:
    """Goodput bars, the slowest step's waterfall, sessions, histograms and invariants."""
    page, result = _report(run, tmp_path, GOLDEN)
    assert one_line(result.err) == (
        f"asynctrace report: wrote {tmp_path / 'report.html'}: 2 steps; "
        "0 invariant violations; 6 sessions"
    )
    for element in ('id="goodput-chart"', 'id="waterfall"', 'id="sessions-timeline"'):
        assert element in page
    assert page.count('class="histogram"') == 4  # total_s, generate_s, reward_s, toolcall_s
    # Step 1 has no wasted seconds, step 2 no overhead; both have unattributed time.
    assert page.count('class="seg hit seg-') == 4 + 4
    assert "chosen: slowest step" in page
    # Step 1, its 10 descendants on rank 0 (finalize included), the rank-1 leaf.
    assert page.count('class="span-row"') == 12
    assert "All invariants hold" in page
    assert '<td class="l">rejected</td><td>1</td>' in page


def test_everything_is_escaped(run: Run, tmp_path: Path) -> None:
    """Span names and attribute values from the trace never become markup."""
    page, _ = _report(run, tmp_path, GOLDEN)
    assert SCRIPT_NAME not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img" not in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    assert len(scripts) == 1  # ours, allowed by its hash in the Content-Security-Policy
    assert "script-src &#x27;sha256-" in page
    assert "http://" not in page
    assert "https://" not in page


def test_step_option(run: Run, tmp_path: Path) -> None:
    """--step N draws that step; an unknown N is a one-line error listing the steps."""
    page, _ = _report(run, tmp_path, GOLDEN, "--step", 2)
    assert "chosen: --step 2" in page
    assert "rl.wasted.failed_trajectory" in page
    result = run("report", GOLDEN, "--step", 9, "-o", tmp_path / "r.html")
    assert result.code == 2
    assert one_line(result.err).endswith("--step 9: no step has rl.iteration=9 (steps: 1, 2)")


def test_violations_exit_1(run: Run, tmp_path: Path) -> None:
    """Invariant violations are listed in the page, and the command exits 1."""
    page, result = _report(run, tmp_path, VIOLATIONS, code=1)
    assert "4 invariant violations" in page
    assert "rl.outer" in page
    assert "4 invariant violations" in result.err
    assert 'id="sessions-timeline"' not in page  # no session files given


def test_inputs_are_recognised_by_content(run: Run, tmp_path: Path) -> None:
    """Files named anything are sorted into traces and sessions by what they hold."""
    shutil.copy(GOLDEN / "traces-r0.jsonl", tmp_path / "a.jsonl")
    shutil.copy(GOLDEN / "sessions-r0.jsonl", tmp_path / "b.jsonl")
    page, _ = _report(run, tmp_path, tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    assert "6 sessions from" in page
    (tmp_path / "c.txt").write_text("hello\n")
    result = run("report", tmp_path / "c.txt", "-o", tmp_path / "r.html")
    assert result.code == 2
    assert one_line(result.err).endswith("neither an asynctrace trace nor a sessions file")
    only_sessions = run("report", GOLDEN / "sessions-r0.jsonl", "-o", tmp_path / "r.html")
    assert only_sessions.code == 2
    assert "no trace files among the inputs" in one_line(only_sessions.err)


def test_session_times_no_float_holds_are_passed_over(run: Run, tmp_path: Path) -> None:
    """A session record whose times are an int past a float's range, NaN or a string: that
    record (or that execution) is left out of the timelines; the page is written."""
    sessions = (GOLDEN / "sessions-r0.jsonl").read_text().splitlines()
    first = json.loads(sessions[0])
    odd = [
        {**first, "session_id": "huge", "submit_ts": 10**400},
        {**first, "session_id": "late", "finalized_ts": "soon"},
        {**first, "session_id": "phase",
         "phases": {"generate": [{"start_ts": 10**400, "end_ts": None}]}},
    ]  # fmt: skip
    path = tmp_path / "sessions-r0.jsonl"
    path.write_text("\n".join(sessions + [json.dumps(o) for o in odd]) + "\n")
    result = run("report", GOLDEN / "traces-r0.jsonl", path, "-o", tmp_path / "r.html")
    assert result.code == 0, result.err
    assert "internal error" not in result.err
    assert (tmp_path / "r.html").read_text()


# -- in a real browser ---------------------------------------------------------

BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1200,1600",
]


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Debian's headless Chromium driven by selenium; skipped when either is missing."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip(
            "chromium and chromedriver are not installed (apt-get install chromium "
            "chromium-driver)"
        )
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    monkeypatch.setenv("SE_OFFLINE", "true")  # never let Selenium Manager download anything
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in BROWSER_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def test_report_in_headless_chromium(run: Run, tmp_path: Path, browser: Any) -> None:
    """The page renders offline, logs no console error, draws its charts, shows names as text."""
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    _report(run, tmp_path, GOLDEN)
    browser.get((tmp_path / "report.html").as_uri())
    body = browser.find_element(By.TAG_NAME, "body")
    assert body.get_attribute("data-ready") == "1"  # our script ran under the CSP
    screenshot = tmp_path / "report.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 10_000
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    assert len(browser.find_elements(By.CSS_SELECTOR, "#goodput-chart rect.seg")) == 8
    assert len(browser.find_elements(By.CSS_SELECTOR, "#waterfall rect.span-bar")) == 12
    assert len(browser.find_elements(By.CSS_SELECTOR, "#sessions-timeline g.session-row")) == 6
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.histogram")) == 4
    assert browser.find_element(By.ID, "invariants").is_displayed()
    names = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#waterfall text.span-name")]
    assert SCRIPT_NAME in names
    assert browser.find_elements(By.TAG_NAME, "img") == []
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - reading it is the check
    resources = browser.execute_script("return performance.getEntriesByType('resource').length")
    assert resources == 0  # nothing fetched: everything is inline


def test_unaccepted_sessions_stand_out_and_the_legend_lists_what_is_there(
    run: Run, tmp_path: Path
) -> None:
    """Failed, rejected and dropped sessions carry a solid mark over their phase bars; the
    legend names only the statuses the run has."""
    page, _ = _report(run, tmp_path, GOLDEN)
    marks = re.findall(r'class="status-mark" data-status="([a-z]+)"', page)
    assert sorted(marks) == ["dropped", "failed", "rejected"]  # one per such session
    timeline = page[page.index('id="sessions-timeline"') :]
    for status in marks:  # drawn after (so over) every phase bar of its row
        at_mark = timeline.index(f'data-status="{status}"')
        rest_of_row = timeline[at_mark : timeline.index("</g>", at_mark)]
        assert 'class="phase"' not in rest_of_row
        assert 'opacity="' not in rest_of_row  # solid, unlike the row's 0.35 background
    legend = re.findall(r"session ([a-z]+) \(submit → finalized\)", page)
    assert legend == ["accepted", "rejected", "failed", "dropped"]  # no "pending"
    only_accepted = tmp_path / "accepted"
    only_accepted.mkdir()
    shutil.copy(GOLDEN / "traces-r0.jsonl", only_accepted)
    (only_accepted / "sessions-r0.jsonl").write_text(
        "".join(
            line + "\n"
            for line in (GOLDEN / "sessions-r0.jsonl").read_text().splitlines()
            if '"accepted"' in line
        )
    )
    page, _ = _report(run, tmp_path, only_accepted)
    assert "status-mark" not in page
    assert re.findall(r"session ([a-z]+) \(submit → finalized\)", page) == ["accepted"]


def test_many_steps_are_grouped_into_mean_bars(run: Run, tmp_path: Path) -> None:
    """Past 240 steps, each bar is the mean of consecutive steps; the page stays small."""
    lines = []
    for i in range(1, 501):
        step, leaf = f"{2 * i:016x}", f"{2 * i + 1:016x}"
        ids = '"trace_id":"00000000000000000000000000000001"'
        lines.append(
            f'{{"ph":"X","name":"gen","ts":{i * 100},"dur":50,"pid":1,"tid":1,"args":'
            f'{{"rl.bucket":"productive",{ids},"span_id":"{leaf}","parent_span_id":"{step}"}}}}'
        )
        lines.append(
            f'{{"ph":"X","name":"step","ts":{i * 100},"dur":100,"pid":1,"tid":1,"args":'
            f'{{"rl.iteration":{i},{ids},"span_id":"{step}"}}}}'
        )
    (tmp_path / "traces-r0.jsonl").write_text("\n".join(lines) + "\n")
    page, _ = _report(run, tmp_path, tmp_path / "traces-r0.jsonl")
    bars = re.findall(r'class="seg hit seg-productive"', page)
    assert len(bars) == 167  # ceil(500 / 240) = 3 steps per bar
    assert "steps 1 to 3 (mean of 3): productive 50 µs" in page


# -- hostile session records and waterfalls --------------------------------------


def _sessions_with(tmp_path: Path, *extra: str) -> Path:
    """The golden sessions file with *extra* raw lines appended."""
    path = tmp_path / "sessions-r0.jsonl"
    path.write_text((GOLDEN / "sessions-r0.jsonl").read_text() + "".join(f"{e}\n" for e in extra))
    return path


_ODD = '{"session_id":"%s","status":"accepted",%s}'


@pytest.mark.parametrize(
    ("lines", "left_out"),
    [
        ([_ODD % ("x", '"total_s":1e999')], 1),  # an infinity once parsed
        ([_ODD % ("x", '"total_s":1' + "0" * 400)], 1),  # an int no float holds
        ([_ODD % ("x", '"queue_s":1e308'), _ODD % ("y", '"queue_s":-1e308')], 2),
        ([_ODD % ("x", '"total_s":"0.4","reward_s":true,"generate_s":null')], 3),
    ],
    ids=["infinity", "huge-int", "extreme-range", "not-numbers"],
)
def test_session_durations_that_are_not_seconds_are_left_out_and_counted(
    run: Run, tmp_path: Path, lines: list[str], left_out: int
) -> None:
    """A ``*_s`` value that is not a number of seconds within ±1e12 gets no bar in a
    histogram; the summary line and the page say how many were left out."""
    sessions = _sessions_with(tmp_path, *lines)
    page, result = _report(run, tmp_path, GOLDEN / "traces-r0.jsonl", sessions)
    plural = "s that are" if left_out != 1 else " that is"
    said = f"left out {left_out} session duration{plural} not a number of seconds within ±1e12"
    assert said in one_line(result.err)
    assert said in page[page.index('id="notes"') :]
    assert page.count('class="histogram"') == 4  # total_s, generate_s, reward_s, toolcall_s


def test_histogram_of_any_finite_range() -> None:
    """The histogram bins any finite values, however far apart (their difference is no
    float), and draws nothing for no finite value."""
    from asynctrace.cli._sessions_html import _histogram

    svg = _histogram("queue_s", [1e308, -1e308, 0.0, -1.7e308, 1.7e308])
    assert "n=5" in svg
    tips = re.findall(r'data-tip="queue_s: [^"]*: (\d+)"', svg)
    assert sum(map(int, tips)) == 5
    assert _histogram("queue_s", [float("nan"), float("inf")]) == ""
    assert "n=3" in _histogram("same", [2.0, 2.0, 2.0])


def test_duration_fields_and_phase_names_are_bounded(run: Run, tmp_path: Path) -> None:
    """A record with hundreds of ``*_s`` fields and phases makes at most 32 histograms and
    32 phase colours; what is left out is counted, on the page and in the summary."""
    from asynctrace.cli._sessions import MAX_DURATION_FIELDS, MAX_PHASES

    fields = {f"f{i}_s": 0.1 for i in range(300)}
    phases = {f"p{i}": [{"start_ts": 1.2, "end_ts": 1.3}] for i in range(300)}
    record = {"session_id": "wide", "status": "accepted", "submit_ts": 1.1,
              "finalized_ts": 1.5, **fields, "phases": phases}  # fmt: skip
    sessions = _sessions_with(tmp_path, json.dumps(record))
    page, result = _report(run, tmp_path, GOLDEN / "traces-r0.jsonl", sessions)
    assert page.count('class="histogram"') == MAX_DURATION_FIELDS
    golden_fields = 4  # total_s, generate_s, reward_s, toolcall_s came first
    left = 300 - (MAX_DURATION_FIELDS - golden_fields)
    line = one_line(result.err)
    assert f"left out {left} session durations of *_s fields past the first 32" in line
    golden_phases = 3  # generate, reward, toolcall
    left_runs = 300 - (MAX_PHASES - golden_phases)
    assert f"left out {left_runs} phase executions of the timeline" in line
    assert len(re.findall(r"<span style=\"--c:[^\"]*\">phase ", page)) == MAX_PHASES
    assert f"left out {left} session durations" in page[page.index('id="notes"') :]


def _span(name: str, span_id: str, parent: str | None, ts: int, dur: int) -> str:
    args: dict[str, Any] = {"trace_id": "00000000000000000000000000000001", "span_id": span_id}
    if parent is not None:
        args["parent_span_id"] = parent
    if name == "step":
        args["rl.iteration"] = 1
    return json.dumps(
        {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args},
        separators=(",", ":"),
    )


def test_waterfall_counts_every_span_it_does_not_draw(run: Run, tmp_path: Path) -> None:
    """Spans of the step's trace that start inside it but are not rows are all counted:
    past the row limit, past the collect limit, and those whose parent is not collected."""
    from asynctrace.cli._waterfall import MAX_WATERFALL_COLLECT, MAX_WATERFALL_ROWS

    step = f"{1:016x}"
    lines = [_span("orphan", f"{0xF0 + i:016x}", f"{0xE0:016x}", 1000 + i, 1) for i in range(3)]
    children = MAX_WATERFALL_COLLECT + 10
    lines += [_span("leaf", f"{0x1000 + i:016x}", step, 1000 + i, 1) for i in range(children)]
    lines.append(_span("step", step, None, 1000, children + 10))  # written at its end
    (tmp_path / "traces-r0.jsonl").write_text("\n".join(lines) + "\n")
    page, _ = _report(run, tmp_path, tmp_path / "traces-r0.jsonl")
    assert page.count('class="span-row"') == MAX_WATERFALL_ROWS
    collected_leaves = MAX_WATERFALL_COLLECT - 3  # the orphans came first
    past_rows = collected_leaves - (MAX_WATERFALL_ROWS - 1)
    hidden = 3 + children + 1 - MAX_WATERFALL_ROWS  # every matching span not drawn
    assert (
        f"{hidden} more spans of this step not drawn ({past_rows} past the "
        f"{MAX_WATERFALL_ROWS}-row limit; 13 past the first 50,000 collected; "
        "3 whose parent is not among the spans collected)."
    ) in page


def test_waterfall_counts_spans_whose_parent_is_missing(run: Run, tmp_path: Path) -> None:
    """A few spans of the step's trace whose parent is in no input: said, not dropped."""
    step = f"{1:016x}"
    lines = [_span("orphan", f"{0xF0 + i:016x}", f"{0xE0:016x}", 1000 + i, 1) for i in range(2)]
    lines += [_span("leaf", f"{0x10:016x}", step, 1000, 1), _span("step", step, None, 1000, 50)]
    (tmp_path / "traces-r0.jsonl").write_text("\n".join(lines) + "\n")
    page, _ = _report(run, tmp_path, tmp_path / "traces-r0.jsonl")
    assert page.count('class="span-row"') == 2
    assert (
        "2 more spans of this step not drawn (2 whose parent is not among the spans collected)."
    ) in page
