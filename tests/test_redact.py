"""Redaction of recorded exception text: URLs, credential pairs, secrets kept with an exception."""

from __future__ import annotations

import json
import time
from pathlib import Path

import _fuzz
import pytest
from _budget import examples
from _forks import exit_code
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.trace import StatusCode

import asynctrace as at
from asynctrace._exception_text import exception_reason
from asynctrace._redact import redact_text
from asynctrace._secret_words import REDACTED
from asynctrace._session_tracer import SessionTracer, install
from asynctrace.testing import CapturedSpans


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Connection timeout to host http://u:p@h:80/x?token=abc&n=1",
            "Connection timeout to host http://h:80/x?token=REDACTED&n=1",
        ),
        (
            "403, message='Forbidden', url='http://h/y?api_key=k1;X-Amz-Signature=s'",
            "403, message='Forbidden', url='http://h/y?api_key=REDACTED;X-Amz-Signature=REDACTED'",
        ),
        ("GET wss://h/ws?%74oken=abc#frag", "GET wss://h/ws?%74oken=REDACTED#REDACTED"),
        ("http://h/run?q=a%20b&n=1 is fine", "http://h/run?q=a%20b&n=1 is fine"),
        ("login failed: password=hunter2 user=bob", "login failed: password=REDACTED user=bob"),
        (
            "{'Authorization': 'Basic dXNlcjpw', 'Host': 'h'}",
            "{'Authorization': 'REDACTED', 'Host': 'h'}",
        ),
        ('{"access_token": "abc", "n": 1}', '{"access_token": "REDACTED", "n": 1}'),
        ("Authorization: Bearer abc.def\nnext line", "Authorization: REDACTED\nnext line"),
        ("Cookie: sid=abc; theme=dark", "Cookie: REDACTED"),
        ("sent Bearer eyJhbGciOi.x-y_z== upstream", "sent Bearer REDACTED upstream"),
        ("BEARER Bearer abc123def", "BEARER Bearer REDACTED"),  # a scheme written twice
        ("login token=Basic bearer abc123def x", "login token=REDACTED x"),
        ("KeyError: 'token'", "KeyError: 'token'"),  # an exception line is no credential
        ('File "/srv/auth.py", line 3, in get_token', 'File "/srv/auth.py", line 3, in get_token'),
        ("nothing to see", "nothing to see"),
    ],
)
def test_redact_text(text: str, expected: str) -> None:
    """URLs lose userinfo, secret query values and fragments; credential pairs lose values."""
    assert redact_text(text) == expected


def test_given_secrets_are_replaced_short_ones_only_where_they_stand_alone() -> None:
    """A long secret goes wherever it is; a short one not out of a longer number."""
    text = "key s3cr3t-value-x in s3cr3t-value-xy, port 424242, code 4242."
    assert redact_text(text, ["s3cr3t-value-x", "4242"]) == (
        "key REDACTED in REDACTEDy, port 424242, code REDACTED."
    )


def test_secrets_go_with_the_exception(spans: CapturedSpans) -> None:
    """Secrets given for an exception redact it on every span it escapes, and its successors."""
    with pytest.raises(RuntimeError):
        with at.managed_span("reward", "outer"), at.managed_span("reward", "inner"):
            span = at.start_span("reward", "call")
            error = ValueError("refused sess-4711-abc")
            at.end_span(span, error, secrets=["sess-4711-abc"])
            try:
                raise error
            except ValueError as exc:
                raise RuntimeError(f"wrapped: {exc}") from exc
    for name in ("call", "inner", "outer"):
        (recorded,) = spans.by_name(name)
        (event,) = recorded.events
        text = json.dumps(dict(event.attributes)) + str(recorded.status.description)
        assert "sess-4711-abc" not in text, name
        assert REDACTED in event.attributes["exception.message"]
        assert recorded.status.status_code is StatusCode.ERROR


def test_user_spans_redact_the_url_of_an_escaping_exception(spans: CapturedSpans) -> None:
    """Any span asynctrace records an exception on: message, stack trace and status redacted."""
    with pytest.raises(ConnectionError), at.managed_span("reward", "env.call"):
        raise ConnectionError("lost http://env:8000/step?token=tok-9&n=1")
    (recorded,) = spans.by_name("env.call")
    (event,) = recorded.events
    for text in (
        event.attributes["exception.message"],
        event.attributes["exception.stacktrace"],
        recorded.status.description,
    ):
        assert "tok-9" not in str(text)
        assert "token=REDACTED" in str(text)


def test_a_failed_session_reason_is_redacted(tmp_path: Path) -> None:
    """An exception escaping session_scope: its reason in the sessions file is redacted."""
    tracer = SessionTracer(tmp_path / "sessions-r0.jsonl", run_id="t", flush_threshold=50)
    previous = install(tracer)
    try:
        with pytest.raises(OSError), at.session_scope():
            raise OSError("GET http://env/step?api_key=k-77 failed")
        tracer.flush(5.0)
    finally:
        install(previous)
        tracer.shutdown(5.0)
    text = (tmp_path / "sessions-r0.jsonl").read_text()
    assert "k-77" not in text
    assert json.loads(text)["reason"] == "OSError: GET http://env/step?api_key=REDACTED failed"


def test_exception_reason_survives_a_broken_str() -> None:
    """An exception whose __str__ raises still gives a reason."""

    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert exception_reason(Broken, Broken()) == "Broken: <unprintable Broken>"


@pytest.mark.parametrize(
    "text",
    [
        "a" * 200_000,
        "a." * 100_000,
        "a=" * 100_000,
        "'a':" * 50_000,
        "http://" * 30_000,
        "x-" * 100_000 + ":",
        "Bearer " * 30_000,
        "Authorization: REDACTED " * 8_000,  # names whose value the URL pass redacted
        "spring.password: REDACTED " * 8_000,
        "%" * 200_000 + "=",
        "-max-tokens=" * 16_000,  # data flags whose values hold more data flags
        "=-tokenizer=" * 16_000,
        "--max-tokens=" * 15_000,
    ],
)
def test_linear_time_on_long_hostile_text(text: str) -> None:
    """No pattern backtracks over a long run: 200 kB of the worst shapes in well under a second."""
    started = time.perf_counter()
    redact_text(text)
    assert time.perf_counter() - started < 1.0


# -- fuzz ------------------------------------------------------------------------

_SECRET = "Zq9SECRETv7"
_names = st.sampled_from(["token", "api_key", "X-Amz-Signature", "password", "auth", "sig"])
_planted = st.one_of(
    st.builds(
        lambda n, h: f"http://{h}/p?{n}={_SECRET}&x=1", _names, st.sampled_from(["h", "h:1"])
    ),
    st.builds(lambda h: f"https://user:{_SECRET}@{h}/", st.sampled_from(["h", "[::1]:80"])),
    st.builds(lambda n: f"{n}={_SECRET}", _names),
    st.builds(lambda n: f"'{n}': '{_SECRET}'", _names),
    st.just(f"Authorization: Basic {_SECRET}"),
    st.just(f"Bearer {_SECRET}"),
)
_noise = st.text(max_size=40)


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(300, 40_000), deadline=None)
@given(_noise, _planted, _noise)
def test_fuzz_a_planted_credential_never_survives(before: str, planted: str, after: str) -> None:
    """Whatever surrounds a credential in a recognised form, its value is gone."""
    separated = f"{before} {planted} {after}"  # a form starts after a space
    result = redact_text(separated)
    assert _SECRET not in result


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(300, 20_000), deadline=None)
@given(st.text(), st.lists(st.text(min_size=1), max_size=4))
def test_fuzz_any_text_any_secrets(text: str, secrets: list[str]) -> None:
    """Any text, any secrets: a string back, no given secret of 8+ characters left in it."""
    result = redact_text(text, secrets)
    assert isinstance(result, str)
    for secret in secrets:
        if len(secret) >= 8 and secret.strip() and REDACTED not in secret:
            assert secret not in result.replace(REDACTED, "\x00")


def test_a_child_forked_while_another_thread_holds_the_secrets_lock_can_redact() -> None:
    """The lock that guards the remembered secrets is made new in a forked child: a child
    forked while another thread held it (walking an exception chain) redacts at once
    instead of hanging on its first exception."""
    import os
    import threading

    from asynctrace import _exception_text

    holding = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with _exception_text._KNOWN_LOCK:
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(5)
    try:
        pid = os.fork()
        if pid == 0:  # the child: never return into pytest
            code = 1
            try:
                exc = ValueError("token=abc123")
                _exception_text.remember(exc, {"abc123"})
                # (an id the parent used for a dead exception may add its secrets: more
                # redaction, as _exception_text says; the one remembered here must be there)
                code = 0 if "abc123" in _exception_text.secrets_of(exc) else 2
            finally:
                os._exit(code)
        assert exit_code(pid, 10, "the forked child, on the secrets lock") == 0
    finally:
        release.set()
        holder.join()
