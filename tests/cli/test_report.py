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
