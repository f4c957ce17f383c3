"""Session payloads: credentials by key, bounds on size and text, keys that read alike."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from _forks import exit_code, fork_quietly, held_by_another_thread

import asynctrace as at
from asynctrace import _payloads
from asynctrace._payloads import MAX_NODES, MAX_PAYLOAD_CHARS, MAX_TEXT, plain_payload
from asynctrace._session_tracer import SessionTracer


def only_record(tracer: SessionTracer) -> dict[str, Any]:
    """The one record the tracer wrote, once flushed."""
    assert tracer.flush(5.0)
    lines = Path(tracer.path).read_text().splitlines()
    (line,) = lines
    record: dict[str, Any] = json.loads(line)
    return record


def test_credential_keys_lose_their_values_whatever_their_type(tracer: SessionTracer) -> None:
    """A key that names a credential (``password``, ``api_key``, ``X-Api-Key``,
    ``Cookie``) has its value written as REDACTED, a number or a mapping too; keys are
    redacted as text is; other keys (token counts among them) are written as given."""
    headers = {
        "Authorization": "Bearer sk-live-abcdef123456",
        "X-Api-Key": "abc123secretvalue",
        "Cookie": "session=xyz789",
        "password": "hunter2",
        "Content-Type": "application/json",
    }
    with at.task_scope(1), at.session_scope():
        with at.trace_session_phase("generate", start_payload={"request_headers": headers}):
            pass
        at.trace_session_event(
            "finalized",
            status="accepted",
            api_key="sk-proj-XYZ987654321",
            password=123456789,
            token={"value": "tok_abcdef", "n": 1},
            num_tokens=42,
            url="https://api.example.com/v1?api_key=QQQ",
            **{"https://u:pw@h/x": 1},
        )
    record = only_record(tracer)
    assert record["phases"]["generate"][0]["payload"] == {
        "request_headers": {
            "Authorization": "REDACTED",
            "X-Api-Key": "REDACTED",
            "Cookie": "REDACTED",
            "password": "REDACTED",
            "Content-Type": "application/json",
        }
    }
    assert record["payload"] == {
        "api_key": "REDACTED",
        "password": "REDACTED",
        "token": "REDACTED",
        "num_tokens": 42,
        "url": "https://api.example.com/v1?api_key=REDACTED",
        "https://h/x": 1,
    }
    text = json.dumps(record)
    for secret in ("hunter2", "abc123", "xyz789", "sk-", "tok_", "123456789", "pw@"):
        assert secret not in text


@pytest.mark.parametrize(
    "key",
    ["session_id", "token_count", "prompt_token_ids", "rollout_key", "auth_method",
     "num_tokens", "secret_sauce_version", "passwordHash", "key", "tokens"],
)  # fmt: skip
def test_keys_that_only_mention_a_credential_word_are_data(
    tracer: SessionTracer, key: str
) -> None:
    """Only a key whose name ends with a credential word loses its value: RL data such
    as ``session_id`` or ``prompt_token_ids`` is written as given."""
    with at.session_scope():
        at.trace_session_event("finalized", status="accepted", sample={key: [7, 8]})
    assert only_record(tracer)["payload"] == {"sample": {key: [7, 8]}}


@pytest.mark.parametrize(
    "key",
    ["token", "access_token", "refreshToken", "OPENAI_API_KEY", "APIKey", "apikey", "auth",
     "Set-Cookie", "client_secret", "db_password", "private_key", "credentials"],
)  # fmt: skip
def test_keys_that_end_with_a_credential_word_lose_their_value(
    tracer: SessionTracer, key: str
) -> None:
    with at.session_scope():
        at.trace_session_event("finalized", status="accepted", sample={key: [7, 8]})
    assert only_record(tracer)["payload"] == {"sample": {key: "REDACTED"}}


def test_keys_that_read_alike_are_all_kept(tracer: SessionTracer) -> None:
    """``1`` and ``"1"``, or two URLs alike once redacted: both values written, the later
    under ``name#2`` (then ``#3``...)."""
    with at.session_scope():
        at.trace_session_event(
            "finalized",
            status="accepted",
            keys={1: "a", "1": "b", (1, 2): 3, None: 4},
            urls={"http://u:p@h/": 1, "http://v:q@h/": 2, "http://h/": 3},
        )
    payload = only_record(tracer)["payload"]
    assert payload["keys"] == {"1": "a", "1#2": "b", "(1, 2)": 3, "None": 4}
    assert payload["urls"] == {"http://h/": 1, "http://h/#2": 2, "http://h/#3": 3}


def test_shared_references_are_bounded_by_a_value_budget(tracer: SessionTracer) -> None:
    """13 lists each holding the one before three times (3**13 leaves once expanded) are
    copied up to MAX_NODES values, then a marker: a small record, counted as truncated."""
    tree: Any = "leaf"
    for _ in range(13):
        tree = [tree, tree, tree]
    with at.session_scope():
        at.trace_session_event("finalized", status="accepted", tree=tree, after=1)
    record = only_record(tracer)
    text = json.dumps(record["payload"])
    assert f"<truncated: more than {MAX_NODES} values>" in text
    assert record["payload"]["<truncated>"] == f"<truncated: more than {MAX_NODES} values>"
    assert "after" not in record["payload"]  # past the budget: the marker stands for it
    assert text.count('"leaf"') < MAX_NODES
    assert len(text) < 200_000
    assert tracer.stats()["truncated_payloads"] == 1


def test_long_strings_are_redacted_then_cut(tracer: SessionTracer) -> None:
    """A string keeps MAX_TEXT characters and a note of the rest, redacted before the cut
    (a credential the cut would halve is gone whole), a huge one too."""
    near = "x" * (MAX_TEXT - 10) + " token=supersecretvalue"
    huge = "y" * (4 * MAX_TEXT - 12) + "https://user:hunter2pw@host/ " + "z" * 1000
    with at.session_scope():
        at.trace_session_event("finalized", status="accepted", near=near, huge=huge, short="ok")
    payload = only_record(tracer)["payload"]
    assert payload["near"].startswith("x" * (MAX_TEXT - 10) + " token=")
    assert payload["near"].endswith(f"...<truncated {len(' token=REDACTED') - 10} chars>")
    # Past its first 4 * MAX_TEXT characters a string is counted as given, not redacted.
    assert payload["huge"] == "y" * MAX_TEXT + f"...<truncated {len(huge) - MAX_TEXT} chars>"
    assert payload["short"] == "ok"
    text = json.dumps(payload)
    assert "supersecret" not in text
    assert "hunt" not in text
    assert tracer.stats()["truncated_payloads"] == 1


def test_a_payloads_text_is_bounded_in_all() -> None:
    """Past MAX_PAYLOAD_CHARS characters of strings in one payload, strings become a
    marker and the containers holding them stop with one."""
    piece = "p" * MAX_TEXT
    pieces = MAX_PAYLOAD_CHARS // MAX_TEXT
    out = plain_payload({"texts": [piece] * (pieces + 5), "later": "x"})
    texts = out["texts"]
    assert texts[: pieces - 1] == [piece] * (pieces - 1)
    # The key "texts" took 5 characters of the budget: the last piece loses 5.
    assert texts[pieces - 1] == "p" * (MAX_TEXT - 5) + "...<truncated 5 chars>"
    assert texts[pieces:] == [f"<truncated: more than {MAX_PAYLOAD_CHARS} characters>"]
    assert out["<truncated>"] == f"<truncated: more than {MAX_PAYLOAD_CHARS} characters>"
    assert "later" not in out


def test_a_user_key_named_like_the_marker_is_kept() -> None:
    """A key ``"<truncated>"`` of the caller's own survives a cut: the marker takes ``#2``."""
    many = {f"k{i}": i for i in range(MAX_NODES + 5)}
    out = plain_payload({"<truncated>": "mine", "many": many})
    assert out["<truncated>"] == "mine"
    assert out["many"]["<truncated>"] == f"<truncated: more than {MAX_NODES} values>"
    # The budget, less the values of "<truncated>" and "many", and the marker.
    assert len(out["many"]) == MAX_NODES - 2 + 1


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        # the userinfo's "@" lies past the redacted prefix
        ("connect http://bob:{s}@db.internal/x failed", "connect http://"),
        # a password holding "/": the host reads "bob" with a port, then a path
        ("connect http://bob:pa/{s}@db.internal/x failed", "connect http://"),
        # a URL in the path of a proxy's URL, cut inside its userinfo
        ("GET https://proxy/fetch/http://u:{s}@h/x", "GET https://proxy/fetch/http://"),
        # userinfo with an "@" of its own ("p@ss"), cut between the two
        ("x=https://bob:p@{s}@h/ y", "x=https://"),
    ],
)
def test_a_url_cut_by_the_redacted_prefix_keeps_no_userinfo(text: str, kept: str) -> None:
    """A string longer than the prefix redaction examines, ending that prefix inside a
    URL's userinfo: kept up to the URL's ``scheme://``, then REDACTED, the rest counted."""
    value = text.format(s="S" * (5 * MAX_TEXT))
    out = plain_payload({"error": value})["error"]
    assert out == f"{kept}REDACTED...<truncated {len(value) - len(kept)} chars>"


def test_a_long_url_whose_host_ends_is_kept_as_before() -> None:
    """A huge URL with a plain host: no userinfo can follow, its first MAX_TEXT characters
    are kept (and redacted) as any long string's are."""
    value = "see https://example.com/" + "a" * (5 * MAX_TEXT)
    out = plain_payload({"u": value})["u"]
    assert out == value[:MAX_TEXT] + f"...<truncated {len(value) - MAX_TEXT} chars>"


def test_a_payload_with_a_key_that_is_not_text_is_refused_without_its_values() -> None:
    """The error names the mapping's type and the first key that is not a ``str`` (its
    repr cut to 80 characters), never the payload's values: they may be secrets, or huge."""
    payload: Any = {"api_key": "sk-live-abcdef123456", 7: "x", "blob": "x" * 5_000_000}
    with pytest.raises(at.ConfigurationError) as caught:
        at.trace_session_phase("generate", start_payload=payload)
    message = str(caught.value)
    assert len(message) < 300
    assert "sk-live" not in message
    assert "key 7 of type int" in message
    assert "trace_session_phase(start_payload)" in message
    with pytest.raises(at.ConfigurationError) as caught:
        at.trace_session_phase("generate", end_payload={("k" * 1000,): 1})  # type: ignore[dict-item]
    assert len(str(caught.value)) < 300
    with pytest.raises(at.ConfigurationError, match="got list$"):
        at.trace_session_phase("generate", start_payload=["password", "hunter2"])  # type: ignore[arg-type]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_payload_cut_in_a_forked_child_does_not_wait_on_the_parent_s_lock(
    tracer: SessionTracer,
) -> None:
    """A thread counts a cut payload as the process forks: the child, cutting a payload
    of its own, records it at once instead of waiting for a lock no thread will free."""
    with held_by_another_thread(_payloads._cut_lock):  # a thread inside the cut counter
        pid = fork_quietly()
        if pid == 0:
            before = _payloads.truncated_payloads()
            out = plain_payload({"big": list(range(MAX_NODES + 10))})
            cut = out["big"][-1] == f"<truncated: more than {MAX_NODES} values>"
            os._exit(0 if cut and _payloads.truncated_payloads() == before + 1 else 3)
        assert exit_code(pid, what="the child cutting a payload") == 0
