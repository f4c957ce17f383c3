"""Payload lists that pair a name with its value: header lists and command lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asynctrace as at
from asynctrace._payloads import plain_payload
from asynctrace._session_tracer import SessionTracer


def only_record(tracer: SessionTracer) -> dict[str, Any]:
    """The one record the tracer wrote, once flushed."""
    assert tracer.flush(5.0)
    (line,) = Path(tracer.path).read_text().splitlines()
    record: dict[str, Any] = json.loads(line)
    return record


def test_a_credential_header_pair_loses_its_value(tracer: SessionTracer) -> None:
    """A header list of pairs, as HTTP clients and ASGI hold headers: the value after a
    credential name is written as REDACTED (a bytes name too); other headers are kept."""
    headers = [
        ("Authorization", "Basic dXNlcjpwYXNz"),
        ("X-Api-Key", "abc123456"),
        ["Ocp-Apim-Subscription-Key", "f00dfeed42"],
        (b"cookie", b"session=xyz789"),
        ("Content-Type", "application/json"),
        ("Accept", "*/*"),
    ]
    with at.session_scope():
        at.trace_session_event("finalized", status="accepted", headers=headers)
    record = only_record(tracer)
    assert record["payload"]["headers"] == [
        ["Authorization", "REDACTED"],
        ["X-Api-Key", "REDACTED"],
        ["Ocp-Apim-Subscription-Key", "REDACTED"],
        ["b'cookie'", "REDACTED"],
        ["Content-Type", "application/json"],
        ["Accept", "*/*"],
    ]
    text = json.dumps(record)
    for secret in ("dXNlcjpwYXNz", "abc123456", "f00dfeed42", "xyz789"):
        assert secret not in text


def test_a_credential_flag_loses_its_argument() -> None:
    """In a command line the argument after ``--password`` or ``--api-key`` is REDACTED;
    the flag, the other arguments and ``--password=...`` (redacted as text) read as given."""
    argv = ["mysql", "--password", "hunter2xyz", "-u", "bob", "--api-key", "sk9", "db"]
    out = plain_payload({"argv": argv, "other": ("run", "--password=hunter2xyz", "x")})
    assert out["argv"] == [
        "mysql", "--password", "REDACTED", "-u", "bob", "--api-key", "REDACTED", "db",
    ]  # fmt: skip
    assert out["other"] == ["run", "--password=REDACTED", "x"]


def test_a_flag_given_as_the_value_after_a_flag_is_the_secret() -> None:
    """``["--token", "--token", "x"]``: the second is the first's value (REDACTED), so
    ``x`` is an argument of its own, kept."""
    assert plain_payload({"a": ["--token", "--token", "x"]})["a"] == ["--token", "REDACTED", "x"]


def test_pairs_of_data_keep_their_values() -> None:
    """Names that only mention a credential word are data, as under a mapping's key:
    ``("token_count", 5)``, ``("auth_method", "oauth")``; a pair whose name is not text,
    a longer list, and a set (no order) are copied as given."""
    out = plain_payload(
        {
            "items": [("token_count", 5), ("auth_method", "oauth"), ("key", "k1")],
            "not_named": [(1, "password"), ("password", "a", "b")],
            "unordered": {"password", "hunter2xyz"},
            "max": ["--max-tokens", "512"],
        }
    )
    assert out["items"] == [["token_count", 5], ["auth_method", "oauth"], ["key", "k1"]]
    assert out["not_named"] == [[1, "password"], ["password", "a", "b"]]
    assert sorted(out["unordered"]) == ["hunter2xyz", "password"]
    assert out["max"] == ["--max-tokens", "512"]


def test_a_credential_pair_s_value_goes_whatever_its_type() -> None:
    """A number, a mapping or a list after a credential name is as secret as a string."""
    out = plain_payload(
        {"h": [("password", 123456789), ("Cookie", {"sid": "x"}), ("X-Auth-Token", ["t1"])]}
    )
    assert out["h"] == [
        ["password", "REDACTED"],
        ["Cookie", "REDACTED"],
        ["X-Auth-Token", "REDACTED"],
    ]
