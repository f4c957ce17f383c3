"""Redaction of recorded text: a cut slice that redaction shrank, credential forms in
exception text (encoded, JSON-escaped, a tool's ``-p``), RL data kept as data, and
``url.full`` kept as sent but for its secrets."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

import asynctrace as at
from asynctrace._exception_text import (
    EXCEPTION_TEXT_CHARS,
    SCAN_MARGIN,
    exception_reason,
    redact_exception_text,
)
from asynctrace._payloads import MAX_TEXT, plain_payload
from asynctrace.testing import capture_spans

PROVIDERS = ["fast", "sdk"]
PASSWORD = "hunter2pass"
TOKEN = "abc123secret"


def recorded(provider: str, raise_it: Any) -> str:
    """Everything the span records of the exception *raise_it* raises, as JSON."""
    with capture_spans(provider=provider) as spans:
        try:
            with at.managed_span("reward", "call"):
                raise_it()
        except Exception:
            pass
        (span,) = spans.spans
        return json.dumps(
            {
                "status": span.status.description,
                "events": [dict(e.attributes or {}) for e in span.events],
            }
        )


# --- a slice cut after redaction shrank it ------------------------------------------------

COOKIE = "Cookie: session=" + "A" * 10_000 + "\n"  # redacted to "Cookie: REDACTED"


def message_cut_in_a_url() -> str:
    """A message whose first slice (kept + margin) ends inside a URL's userinfo, after a
    long Cookie line that redaction shrinks by more than the margin."""
    cut = EXCEPTION_TEXT_CHARS + SCAN_MARGIN
    pad = "x" * (cut - len(COOKIE) - len("db=postgres://bob:hunt"))
    return COOKIE + pad + f"db=postgres://bob:{PASSWORD}@db.internal/prod " + "y" * 5000


def stack_cut_in_a_url() -> str:
    """A text whose last slice starts inside a URL's userinfo, before a long Cookie line."""
    last = EXCEPTION_TEXT_CHARS // 2
    rest = f"b:{PASSWORD}@h/x " + COOKIE
    rest += "z" * (last + SCAN_MARGIN - len(rest))
    return "w" * 100_000 + "GET http://bo" + rest


def test_a_url_the_first_slice_cuts_after_a_shrinking_line_is_not_kept() -> None:
    out = redact_exception_text(message_cut_in_a_url())
    assert PASSWORD not in out
    assert "hunt" not in out
    assert out.startswith("Cookie: REDACTED\nxxx")
    assert len(out) <= EXCEPTION_TEXT_CHARS + 64


def test_a_url_the_last_slice_cuts_before_a_shrinking_line_is_not_kept() -> None:
    out = redact_exception_text(stack_cut_in_a_url(), tail=True)
    assert PASSWORD not in out
    assert out.endswith("z" * 100)
    assert len(out) <= EXCEPTION_TEXT_CHARS + 64


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_spans_message_and_stack_trace_keep_no_secret_across_a_shrunk_cut(
    provider: str,
) -> None:
    def head() -> None:
        raise RuntimeError(message_cut_in_a_url())

    def tail() -> None:
        raise RuntimeError(stack_cut_in_a_url())

    for raise_it in (head, tail):
        text = recorded(provider, raise_it)
        assert PASSWORD not in text, raise_it.__name__
        assert "hunt" not in text, raise_it.__name__
        assert "RuntimeError" in text, raise_it.__name__  # recorded...
        assert "REDACTED" in text, raise_it.__name__  # ...and redacted


def test_a_sessions_reason_keeps_no_secret_across_a_shrunk_cut() -> None:
    reason = exception_reason(OSError, OSError(message_cut_in_a_url()))
    assert reason.startswith("OSError: Cookie: REDACTED")
    assert PASSWORD not in reason


def test_a_payload_string_follows_the_same_rule() -> None:
    """A payload's string past the prefix examined: the shrunk prefix is not kept to its
    raw cut edge (redacted whole instead), as an exception's text is not."""
    scan = 4 * MAX_TEXT
    cookie = "Cookie: " + "A" * (scan - MAX_TEXT) + "\n"
    pad = "x" * (scan - len(cookie) - len("postgres://bob:hunt"))
    value = cookie + pad + f"postgres://bob:{PASSWORD}@h/x " + "y" * 1000
    out = plain_payload({"error": value})["error"]
    assert PASSWORD not in out
    assert "hunt" not in out
    assert out.startswith("Cookie: REDACTED\nxxx")


# --- credential forms in exception text ---------------------------------------------------

FORMS = {
    "encoded query in a query value": (
        "Client error '401 Unauthorized' for url "
        f"'https://api/login?next=%2Fcb%3Faccess_token%3D{TOKEN}&n=1'"
    ),
    "encoded pair in a query value": f"GET https://api/x?q=a%26token%3D{TOKEN} failed",
    "JSON-escaped URL": f'upstream said {{"dsn":"postgres:\\/\\/bob:{PASSWORD}@db\\/prod"}}',
    "JSON-escaped URL, query": f'{{"u":"https:\\/\\/h\\/x?token={TOKEN}&n=1"}}',
    "percent-encoded URL in text": (
        f"redirect refused: http%3A%2F%2Fbob%3A{PASSWORD}%40internal%2F"
    ),
    "mysql argv": f"Command '['mysql', '-uroot', '-p{PASSWORD}', 'db']' returned 1.",
    "mysqldump line": f"mysqldump -u root -p{PASSWORD} mydb > out.sql failed",
    "sshpass argv": f"Command '['sshpass', '-p', '{PASSWORD}', 'ssh', 'h']' returned 5.",
    "docker login": f"docker login -u bob -p {PASSWORD} registry.example failed",
}


@pytest.mark.parametrize("label", list(FORMS))
def test_credential_forms_in_text_are_redacted(label: str) -> None:
    out = at.redact_text(FORMS[label])
    assert TOKEN not in out, out
    assert PASSWORD not in out, out


def test_the_forms_keep_the_rest_of_the_text() -> None:
    assert at.redact_text(FORMS["encoded pair in a query value"]) == (
        "GET https://api/x?q=a%26token%3DREDACTED failed"
    )
    assert at.redact_text(FORMS["JSON-escaped URL"]) == (
        'upstream said {"dsn":"postgres:\\/\\/db\\/prod"}'
    )
    assert at.redact_text(FORMS["JSON-escaped URL, query"]) == (
        '{"u":"https:\\/\\/h\\/x?token=REDACTED&n=1"}'
    )
    assert at.redact_text(FORMS["percent-encoded URL in text"]) == (
        "redirect refused: http%3A%2F%2Finternal%2F"
    )
    assert at.redact_text(FORMS["mysql argv"]) == (
        "Command '['mysql', '-uroot', '-pREDACTED', 'db']' returned 1."
    )
    assert at.redact_text(FORMS["docker login"]) == (
        "docker login -u bob -p REDACTED registry.example failed"
    )


@pytest.mark.parametrize(
    "text",
    [
        "mysql -h db -p -e 'select 1' failed",  # a bare -p asks for the password
        "grep -pattern x; pip download -p y; python -pz",  # no tool that takes one
        "ssh -p 2222 host: connection refused",
        "mysql: ERROR 1045\n-pretty flag of another tool",  # -p on a later line
    ],
)
def test_p_elsewhere_is_left_as_it_is(text: str) -> None:
    assert at.redact_text(text) == text


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_failed_mysql_command_records_no_password(provider: str) -> None:
    """A real subprocess run as ``mysql -p<password>`` (the Python interpreter under that
    name), failing: its CalledProcessError reaches the span without the password."""

    def run() -> None:
        subprocess.run(
            ["mysql", "-c", "import sys; sys.exit(3)", f"-p{PASSWORD}"],
            executable=sys.executable,
            check=True,
        )

    text = recorded(provider, run)
    assert "CalledProcessError" in text
    assert PASSWORD not in text
    assert "-pREDACTED" in text


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("label", ["encoded query in a query value", "JSON-escaped URL"])
def test_the_forms_are_redacted_on_spans(provider: str, label: str) -> None:
    def raise_it() -> None:
        raise RuntimeError(FORMS[label])

    text = recorded(provider, raise_it)
    assert TOKEN not in text
    assert PASSWORD not in text
    assert f"RuntimeError: {FORMS[label][:12]}" in text  # recorded, its start as raised


# --- RL data stays data; secrets stay secret ----------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "ValueError: max_tokens=4096 exceeds the context window (prompt_tokens=3900)",
        "{'max_new_tokens': 512, 'temperature': 0.7}",
        "invalid sampler config: sigma=-0.5 design=a2",
        "worker died: signal=9 exit_code=-9",
        "KeyError: cache_keys=3",
        "bad shape for num_keys=4 token_ids=[1, 2, 3]",
        "author=alice authority=x commit=abc",
        'TypeError: forward() got {"input_token_ids": [1,2,3], "token_count": 7}',
        "train.py --max-tokens 4096 --num-keys 3",
    ],
)
def test_rl_data_keeps_its_values(text: str) -> None:
    assert at.redact_text(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(token=abc123)", "(token=REDACTED)"),
        ("{'password': 'x', 'key': abc}", "{'password': 'REDACTED', 'key': REDACTED}"),
        ("f(api_key=sk-1, n=2)", "f(api_key=REDACTED, n=2)"),
        ("[secret=s3]", "[secret=REDACTED]"),
    ],
)
def test_an_unquoted_value_leaves_the_punctuation_after_it(text: str, expected: str) -> None:
    assert at.redact_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"api_token={TOKEN}", "api_token=REDACTED"),
        (f"my_password={PASSWORD}", "my_password=REDACTED"),
        (f"x_secret_key={TOKEN}", "x_secret_key=REDACTED"),
        (f"api_keys=[{TOKEN}]", "api_keys=REDACTED"),
        (f"access_tokens={TOKEN}", "access_tokens=REDACTED"),
        (f"key={TOKEN} monkey=1", "key=REDACTED monkey=REDACTED"),
        (f"auth={TOKEN} oauth_token={TOKEN}", "auth=REDACTED oauth_token=REDACTED"),
        (f"sig={TOKEN} x_sig={TOKEN}", "sig=REDACTED x_sig=REDACTED"),
        (f"authorization=Basic {TOKEN}", "authorization=REDACTED"),
        (f"--api-key {TOKEN} --max-tokens 8", "--api-key REDACTED --max-tokens 8"),
        (f"password={TOKEN},", "password=REDACTED,"),
        (f"new_passwords={PASSWORD}", "new_passwords=REDACTED"),
        (f"cached_cookies={TOKEN}", "cached_cookies=REDACTED"),
        (f"--new-passwords {PASSWORD}", "--new-passwords REDACTED"),
        (f"{{'generated_secrets': '{TOKEN}'}}", "{'generated_secrets': 'REDACTED'}"),
        (f"new_keys={TOKEN}", "new_keys=REDACTED"),
    ],
)
def test_secrets_are_still_redacted(text: str, expected: str) -> None:
    assert at.redact_text(text) == expected


def test_data_names_follow_the_key_rule() -> None:
    """What a payload's key rule calls a credential is never data in text, and the data
    names are ones it calls data."""
    for name in ("max_tokens", "token_ids", "token_count", "num_keys", "cache_keys"):
        assert not at.is_credential_key(name)
        assert at.redact_text(f"{name}=5") == f"{name}=5"
    for name in ("api_token", "my_password", "x_secret_key", "access_token"):
        assert at.is_credential_key(name)
        assert at.redact_text(f"{name}=5") == f"{name}=REDACTED"


# --- url.full as sent but for its secrets -------------------------------------------------


@pytest.fixture
def redact_url() -> Any:
    pytest.importorskip("asynctrace_contrib._http")
    from asynctrace_contrib._http import redact_url

    return redact_url


@pytest.mark.parametrize(
    ("url", "expected", "nested"),
    [
        (
            f"http://h/x?next=/cb?token={TOKEN}&page=2",
            "http://h/x?next=%2Fcb%3Ftoken%3DREDACTED&page=2",
            "/cb?token=REDACTED",
        ),
        (
            f"http://h/x?next=%2Fcb%3Ftoken%3D{TOKEN}",
            "http://h/x?next=%2Fcb%3Ftoken%3DREDACTED",
            "/cb?token=REDACTED",
        ),
        (
            f"http://h/x?q=a%26token%3D{TOKEN}",
            "http://h/x?q=a%26token%3DREDACTED",
            "a&token=REDACTED",
        ),
    ],
)
def test_url_full_encodes_a_nested_value_once(
    redact_url: Any, url: str, expected: str, nested: str
) -> None:
    out = redact_url(url)
    assert out == expected
    assert parse_qsl(urlsplit(out).query)[0][1] == nested  # decoded once: the value sent


def test_url_full_keeps_the_rest_as_sent(redact_url: Any) -> None:
    assert redact_url("http://h/x?flag&a=x%20y;token=t&b=1") == (
        "http://h/x?flag&a=x%20y;token=REDACTED&b=1"
    )
