"""The AReaL shim's ``args``: a command line's secret flag values, and words the program
makes secret later, are not recorded."""

from __future__ import annotations

import json
from pathlib import Path

from _child_script import run_script
from asynctrace_contrib.areal import _values

CMD = ["python", "-m", "sglang.launch_server", "--api-key", "hunter2", "--port", "30000"]


def test_a_command_lines_secret_flag_value_is_redacted() -> None:
    """["--api-key", "hunter2"] in args: the value after the flag is REDACTED, as a
    session payload hides it; a pair's credential value too; data stays."""
    attributes = _values._attributes(
        {
            "cmd": CMD,
            "pair": ["Authorization", "Bearer tok123"],
            "tokens": ["--max-tokens", "512"],
            "names": ["token_count", "5"],
        }
    )
    assert attributes is not None
    assert attributes["cmd"] == [*CMD[:4], "REDACTED", "--port", "30000"]
    assert attributes["pair"] == ["Authorization", "REDACTED"]
    assert attributes["tokens"] == ["--max-tokens", "512"]
    assert attributes["names"] == ["token_count", "5"]


CHILD = """
import glob
import asynctrace
from asynctrace_contrib import areal as pt

root = ROOT
config = {"enabled": True, "experiment_name": "e", "trial_name": "t", "fileroot": root}
pt.configure(config, rank=0)
with pt.trace_scope("before", args={"note": "rolloutcode=hunter2"}):
    pass
asynctrace.register_secret_words(["rolloutcode"])
with pt.trace_scope("after", args={"note": "rolloutcode=hunter2", "cmd": CMD}):
    pass
pt.save(force=True)
asynctrace.shutdown()
print(glob.glob(root + "/**/traces-r0.jsonl", recursive=True)[0])
"""


def test_a_string_found_plain_is_redacted_once_its_word_is_made_secret(tmp_path: Path) -> None:
    """A string the shim remembered as holding nothing secret is redacted after the program
    registers a secret word it holds (the remembered strings are forgotten then)."""
    script = CHILD.replace("ROOT", repr(str(tmp_path))).replace("CMD", repr(CMD))
    (path,) = run_script(script, hang_s=60)[-1:]
    events = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    by_name = {event.get("name"): event for event in events}
    assert by_name["before"]["args"]["note"] == "rolloutcode=hunter2"  # not secret then
    assert by_name["after"]["args"]["note"] == "rolloutcode=REDACTED"
    assert "hunter2" not in json.dumps(by_name["after"])


def test_a_header_pairs_value_is_hidden_as_in_session_payloads() -> None:
    """A pair named by a credential header with a '-' (Ocp-Apim-Subscription-Key) hides its
    value, as a session payload's pair does."""
    attributes = _values._attributes({"pair": ["Ocp-Apim-Subscription-Key", "abc123"]})
    assert attributes == {"pair": ["Ocp-Apim-Subscription-Key", "REDACTED"]}
