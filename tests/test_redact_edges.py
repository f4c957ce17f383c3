"""Redaction's edge cases: credential forms a reviewer found leaking, and cost bounds.

Each test names the form that leaked (or the input that took too long) before
the fix it guards: URLs glued to other text or inside another URL's query or
path, passwords holding an unencoded ``@`` and ``/``, credential pairs whose
value holds a separator or is bracketed, header spellings, exception groups
past the first 255 members, spans made by asynctrace's own tracer.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable

import pytest
from opentelemetry.trace import StatusCode

import asynctrace as at
from asynctrace import _secret_words
from asynctrace._exception_text import remember, secrets_of
from asynctrace._payloads import plain_payload
from asynctrace._redact import redact_text
from asynctrace._redact_urls import redact_query
from asynctrace._secret_words import REDACTED
from asynctrace.testing import capture_spans

# -- URLs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("retry 3http://user:hunter2@host/x", "retry 3http://host/x"),
        ("a-http://user:hunter2@host/x", "a-http://host/x"),
        ("see ...http://user:hunter2@host/x", "see ...http://host/x"),
        ("x" * 40 + ".redis://user:hunter2@host/x", "x" * 40 + ".redis://host/x"),
        ("s" * 40 + "://user:hunter2@host/", "s" * 40 + "://host/"),
    ],
)
def test_a_url_glued_to_other_text_loses_its_userinfo(text: str, expected: str) -> None:
    """A scheme after a digit, "." or "-", or longer than 32 characters, is still a URL."""
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://h/cb?next=http://u:hunter2@h2/", "http://h/cb?next=http://h2/"),
        (
            "http://h/cb?next=https%3A%2F%2Fu%3Ahunter2%40h2%2F%3Ftoken%3Dsecretval",
            "http://h/cb?next=https://h2/%3Ftoken%3DREDACTED",
        ),
        (
            "http://h/cb?next=https%3A%2F%2Fb.s3.example%2Fk%3FX-Amz-Signature%3Dsigval123",
            "http://h/cb?next=https://b.s3.example/k%3FX-Amz-Signature%3DREDACTED",
        ),
        ("http://h/cb?next=http%3A%2F%2Fh2%2F&n=1", "http://h/cb?next=http%3A%2F%2Fh2%2F&n=1"),
    ],
)
def test_a_url_given_as_a_query_value_is_redacted_inside(text: str, expected: str) -> None:
    """A query value that is a URL, as sent or percent-encoded, loses its userinfo too."""
    assert redact_text(text) == expected
    assert "hunter2" not in redact_query(text.partition("?")[2])


def test_urls_nested_without_end_are_replaced_past_a_depth() -> None:
    """``?a=http://...?a=http://...`` many times over: bounded work, no secret kept."""
    text = "http://h/?a=" * 20_000 + "http://u:hunter2@h/"
    started = time.perf_counter()
    result = redact_text(text)
    assert time.perf_counter() - started < 1.0
    assert "hunter2" not in result


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "https://proxy.example/fetch/https://admin:hunter2@internal/x",
            "https://proxy.example/fetch/https://internal/x",
        ),
        (
            "GET http://proxy/http://u:hunter2@h/x?token=abc 502",
            f"GET http://proxy/http://h/x?token={REDACTED} 502",
        ),
        ("http://h/?http://u:hunter2@h2/x&n=1", "http://h/?http://h2/x&n=1"),
        ("http://h/?http://u:hunter2@h2/x=1", "http://h/?http://h2/x=1"),
        (
            "http://a/http://b/http://c/http://u:hunter2@d/",
            "http://a/http://b/http://c/http://d/",
        ),
    ],
)
def test_a_url_inside_another_urls_path_or_query_key_loses_its_userinfo(
    text: str, expected: str
) -> None:
    """A second ``://`` in a URL's path (a proxy's ``/fetch/https://...``) or as a bare
    query piece was never looked at: its userinfo was kept."""
    assert redact_text(text) == expected


def test_urls_nested_in_paths_without_end_are_replaced_past_a_depth() -> None:
    """``http://h/http://h/...`` many times over: bounded work, no secret kept."""
    text = "http://h/" * 20_000 + "http://u:hunter2@h/"
    result = redact_text(text)
    assert "hunter2" not in result
    assert result.startswith("http://h/http://h/")


@pytest.mark.parametrize(
    "text",
    [
        "http://user:Zq9SEC@RET/x@host/x",
        "http://user:Zq9SEC@RET?x@host/x",
        "http://user:Zq9SEC@RET#x@host/x",
        "http://user:Zq9SEC@RET/x?y#z@host/x",
        "http://user:Zq9/SEC@RET@host/x",
        "see http://user:Zq9SEC@RET/x@host/x?n=1 for it",
    ],
)
def test_a_password_with_an_unencoded_at_and_slash_loses_all_of_it(text: str) -> None:
    """``u:Zq9SEC@RET/x@host``: cut at the first ``@`` of the authority, ``RET/x`` (the rest
    of the password) was kept as host and path."""
    result = redact_text(text)
    assert "SEC" not in result
    assert "RET" not in result
    assert "http://host/x" in result


def test_a_url_without_userinfo_keeps_an_at_in_its_path() -> None:
    """No ``:`` or ``@`` before the first ``/``: an ``@`` in the path is no userinfo."""
    assert redact_text("GET https://h/@user/post failed") == "GET https://h/@user/post failed"
    assert redact_text("http://u:pw@h/x") == "http://h/x"


def test_path_parameters_lose_secret_values() -> None:
    """``/x;token=abc`` (matrix parameters): the value goes, the rest of the path stays."""
    assert (
        redact_text("GET http://h/x;token=abc/y;n=1") == f"GET http://h/x;token={REDACTED}/y;n=1"
    )


# -- credential pairs -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password=Tr0ub4dor&3xyz", "password=REDACTED"),
        ("password=abc#defghi", "password=REDACTED"),
        ("password=abc,defghi", "password=REDACTED"),
        ("password=ab;cdefgh", "password=REDACTED"),
        ("password=ab)cdefgh", "password=REDACTED"),
        ("api_key=ab=cdefgh", "api_key=REDACTED"),
        ("token=abc&n=1 next", "token=REDACTED&n=1 next"),
        ("{b'password': b'hunter2'}", "{b'password': b'REDACTED'}"),
        ("'password': b'hunter2'", "'password': b'REDACTED'"),
        ('"password": "ab\\"cdef"', '"password": "REDACTED"'),
        ("user[password]=hunter2", "user[password]=REDACTED"),
        ("api-key: sk-abcdef123456", "api-key: REDACTED"),
        ("Private-Token: glpat-abcdef", "Private-Token: REDACTED"),
        ("Ocp-Apim-Subscription-Key: abcdef123", "Ocp-Apim-Subscription-Key: REDACTED"),
        ("DD-API-KEY: abc123", "DD-API-KEY: REDACTED"),
        ("password:\thunter2", "password:\tREDACTED"),
        (
            "[(b'cookie', b'session=abcdef'), (b'x-api-key', b'abcdef123')]",
            "[(b'cookie', b'REDACTED'), (b'x-api-key', b'REDACTED')]",
        ),
        (
            "[('Host', 'h'), ('X-Auth-Token', 'abc')]",
            "[('Host', 'h'), ('X-Auth-Token', 'REDACTED')]",
        ),
        ("KeyError: 'token'", "KeyError: 'token'"),
        ("AuthError: denied", "AuthError: denied"),
        ("TokenExpiredError: expired at 12:00", "TokenExpiredError: expired at 12:00"),
        ("monkey: 1", "monkey: 1"),
        (
            "cryptography.fernet.InvalidToken: bad data",
            "cryptography.fernet.InvalidToken: bad data",
        ),
        ("AccessToken: abc", "AccessToken: REDACTED"),
    ],
)
def test_credential_pairs_lose_their_whole_value(text: str, expected: str) -> None:
    """A value with ``&#,;)=`` in it, a bytes repr, an escaped quote, more header spellings."""
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("auth=('bob', 'hunter2')", "auth=REDACTED"),
        (
            "request failed: auth=('bob', 'hunter2'), timeout=5",
            "request failed: auth=REDACTED, timeout=5",
        ),
        ("credentials={'user': 'bob', 'pw': 'hunter2'}", "credentials=REDACTED"),
        ("auth=(user, hunter2) next", "auth=REDACTED next"),
        ("{'auth': ('bob', 'hun)ter2'), 'n': 1}", "{'auth': REDACTED, 'n': 1}"),
        ('"password": ["a", "hunter2"], "n": 1', '"password": REDACTED, "n": 1'),
        ("password=[['a'], {'c': ('hunter2',)}] ok", "password=REDACTED ok"),
        ("auth=(bob]hunter2) x", "auth=REDACTED x"),
        ("auth=('bob', 'hunter2'\nnext line", "auth=REDACTED\nnext line"),
        ("auth=('bob', 'hunter2\nnext line", "auth=REDACTED\nnext line"),
        ("Authorization: ('bob', 'hunter2')", "Authorization: REDACTED"),
        ("auth=" + "(" * 100 + ")" * 100 + " hunter2\nnext", "auth=REDACTED\nnext"),
        ("KeyError: ('user', 1)", "KeyError: ('user', 1)"),
        ("shape=(2, 3) ok", "shape=(2, 3) ok"),
    ],
)
def test_a_bracketed_value_goes_whole(text: str, expected: str) -> None:
    """``auth=('bob', 'hunter2')`` (requests' and httpx's form) and a dict kept everything
    after the bracket: the value runs to its matching bracket, or to the end of its line."""
    assert redact_text(text) == expected


_HOSTILE = 1_000_000


def _seconds(text: str) -> float:
    started = time.perf_counter()
    redact_text(text)
    return time.perf_counter() - started


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "password=" + "a&" * (n // 2),
        lambda n: "token=" + "&a" * (n // 2),
        lambda n: "password='" + "\\'" * (n // 2),
        lambda n: "(b'x-api-key', b'" * (n // 16),
        lambda n: "('a', '" * (n // 7),
        lambda n: "a:// " * (n // 5),
        lambda n: "3http://" * (n // 8),
        lambda n: "x-" * (n // 2) + ": v",
        lambda n: "a[" * (n // 2) + "]=",
        lambda n: "password=" + ";" * n,
        lambda n: "auth=(" + "'a'," * (n // 4),
        lambda n: "password=" + "(" * n,
        lambda n: "password=(" + "[]" * (n // 2),
        lambda n: "auth=(\n" * (n // 7),
        lambda n: "auth=() " * (n // 8),
        lambda n: "'auth': (" + '"\\"",' * (n // 5),
        lambda n: "http://h/" + "https://p/" * (n // 10),
        lambda n: "http://h/?" + "http://u@h/&" * (n // 12),
        lambda n: "http://a:b@" * (n // 11),
        lambda n: "http://a:" * (n // 9),
        lambda n: "--password" * (n // 10),
        lambda n: "--password " * (n // 11),
        lambda n: "'--password', " * (n // 14),
        lambda n: "-u " * (n // 3),
        lambda n: "-----BEGIN " * (n // 11),
        lambda n: "-----BEGIN PRIVATE KEY-----" * (n // 27),
        lambda n: "-----BEGIN RSA PRIVATE KEY-----\n" + "-----END PRIVATE KEY-----" * (n // 25),
        lambda n: "postgres://user: " * (n // 17) + "@",
        lambda n: "postgres://user:'" * (n // 17) + "@",
        lambda n: "x://u:abcdefg " * (n // 14) + "\n@",
        lambda n: 'Cookie: a="' * (n // 11),
        lambda n: "password: '" * (n // 11),
    ],
)
def test_linear_time_on_a_megabyte_of_hostile_text(make: Callable[[int], str]) -> None:
    """The patterns added for the forms above stay linear: 1 MB takes about four times what
    256 KB takes (a quadratic pattern, sixteen), and never seconds.

    A ratio, not a time: a loaded host slows both alike. One slow measure is taken again.
    """
    for _ in range(2):
        quarter, full = _seconds(make(_HOSTILE // 4)), _seconds(make(_HOSTILE))
        if full < max(8 * quarter, 0.5):
            break
    assert full < max(8 * quarter, 0.5), f"256 KB in {quarter:.3f} s, 1 MB in {full:.3f} s"
    assert full < 10.0


# -- secrets given for an exception -----------------------------------------------


def test_secrets_shorter_than_four_characters_are_not_replaced() -> None:
    """``Upgrade-Insecure-Requests: 1`` made every ``1`` of a stack trace REDACTED."""
    text = 'File "/app/main.py", line 1, in f\nIndexError: index 1 out of range'
    assert redact_text(text, {"1", "?0", "u=0"}) == text
    assert redact_text("key abcd in it", {"abcd"}) == f"key {REDACTED} in it"


_STACK = 'File "/srv/app/handlers/step.py", line 42, in call_env\n    await x(y)\n' * 300


@pytest.mark.parametrize(
    ("text", "secrets"),
    [
        # secrets that are long near-prefixes of a long run: a regex alternation of them
        # backtracked over each (10 s for 1 MB before)
        ("a" * 1_000_000, ["a" * 9999 + "b", "a" * 7 + "b"]),
        ("a" * 100_000, ["a" * 8000 + "b", "zzzzzzzz"]),
        # thousands of secrets (header values of a hostile request) on a stack trace
        (_STACK * 2, [f"q{i:03d}" for i in range(2000)]),
        (_STACK * 2, [f"secretvalue{i:04d}xyz" for i in range(5000)]),
    ],
)
def test_many_or_long_secrets_cost_linear_time(text: str, secrets: list[str]) -> None:
    """Secrets are looked for with str.find, capped in number and length: no regex per call."""
    started = time.perf_counter()
    redact_text(text, secrets)
    assert time.perf_counter() - started < 0.2


def test_a_thousand_header_values_are_all_replaced() -> None:
    """The cap on secrets is above what a request sends: every value of 1000 is replaced."""
    secrets = [f"v{i:05d}" for i in range(1000)]
    text = " ".join(secrets[::7])
    assert set(redact_text(text, secrets).split()) == {REDACTED}


@pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup is Python 3.11+")
def test_the_members_a_traceback_shows_keep_their_secrets_in_a_large_group() -> None:
    """300 members: the first 15 (the ones format_exception shows) are the ones looked at."""
    members = []
    for i in range(300):
        error = RuntimeError(f"upstream rejected sess-{i:04d}-SECRETVAL")
        remember(error, {f"sess-{i:04d}-SECRETVAL"})
        members.append(error)
    group = ExceptionGroup("unhandled errors in a TaskGroup", members)  # noqa: F821
    found = secrets_of(group)
    assert "sess-0000-SECRETVAL" in found
    text = redact_text("".join(traceback.format_exception(group)), found)
    assert "SECRETVAL" not in text


def test_the_secrets_of_thousands_of_recent_exceptions_are_kept() -> None:
    """More than 1024 failed requests in flight: the oldest still redacts with its secrets."""
    errors = []
    for i in range(2000):
        error = RuntimeError(f"x sess2-{i:05d}-SECRETVAL")
        remember(error, {f"sess2-{i:05d}-SECRETVAL"})
        errors.append(error)
    assert "sess2-00000-SECRETVAL" in secrets_of(errors[0])


def test_an_exception_whose_attributes_raise_is_still_recorded() -> None:
    """A user's exception whose ``exceptions`` property raises: the span still records it."""

    class Odd(Exception):
        @property
        def exceptions(self) -> tuple[BaseException, ...]:
            raise RuntimeError("no")

    remember(ValueError(), {"x" * 10})  # something remembered, so secrets_of walks
    assert isinstance(secrets_of(Odd("boom")), frozenset)  # no raise
    with capture_spans("all", provider="fast") as captured:
        with pytest.raises(Odd), at.managed_span("reward", "step"):
            raise Odd("GET http://u:hunter2@h/?token=abc123")
    (span,) = captured.spans
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "Odd: GET http://h/?token=REDACTED"


def test_registered_secret_words_make_names_secret_like_everywhere() -> None:
    """An integration's own secret keys (``rolloutcode``): ``rolloutcode=...`` is a credential."""
    before = redact_text("http://h/?edgerolloutcode=v-SECRET-1&n=1")
    _secret_words.register_secret_words(["edgerolloutcode"])
    after = redact_text("http://h/?edgerolloutcode=v-SECRET-1&n=1")
    assert "v-SECRET-1" in before
    assert after == "http://h/?edgerolloutcode=REDACTED&n=1"


# -- asynctrace's own tracer ------------------------------------------------------


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_start_as_current_span_records_an_exception_redacted(provider: str) -> None:
    """``get_tracer().start_as_current_span``: OpenTelemetry's use_span set ``"<type>:
    <message>"`` as the status description, and the SDK its message and stack trace,
    unredacted."""
    url = "http://user:hunter2@h/x?token=abc123"
    error = ValueError(f"fetch {url} for sess-4711-xyz")
    remember(error, {"sess-4711-xyz"})  # as a failed request's span remembers them
    with capture_spans("all", provider=provider) as captured:
        tracer = at.get_tracer()
        with pytest.raises(ValueError), tracer.start_as_current_span("direct"):
            raise error
    (span,) = captured.spans
    (event,) = [e for e in span.events if e.name == "exception"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == f"ValueError: fetch http://h/x?token=REDACTED for {REDACTED}"
    assert event.attributes["exception.message"] == (
        f"fetch http://h/x?token=REDACTED for {REDACTED}"
    )
    assert "hunter2" not in str(event.attributes["exception.stacktrace"])


def test_a_fast_span_status_description_is_redacted() -> None:
    """``span.set_status(Status(ERROR, f"{exc}"))`` on any span of the fast provider."""
    from opentelemetry.trace import Status

    with capture_spans("all", provider="fast") as captured:
        span = at.get_tracer().start_span("s")
        span.set_status(Status(StatusCode.ERROR, "refused http://u:hunter2@h/?api_key=k1"))
        span.end()
        other = at.get_tracer().start_span("t")
        other.set_status(StatusCode.ERROR, "token=abc123")
        other.end()
    descriptions = sorted(str(s.status.description) for s in captured.spans)
    assert descriptions == ["refused http://h/?api_key=REDACTED", "token=REDACTED"]


# -- payloads ---------------------------------------------------------------------


def test_payload_values_are_redacted_as_the_reason_is() -> None:
    """A session payload's exception and URL values were recorded as given."""
    error = ValueError("GET http://u:hunter2@h/step?token=abc123 for sess-4711-xyz")
    remember(error, {"sess-4711-xyz"})

    class Thing:
        def __str__(self) -> str:
            return "Authorization: Bearer abcdef"

    payload = plain_payload(
        {"error": error, "url": "http://u:hunter2@h/?token=abc123", "thing": Thing(), "n": 1}
    )
    assert payload == {
        "error": f"GET http://h/step?token=REDACTED for {REDACTED}",
        "url": "http://h/?token=REDACTED",
        "thing": "Authorization: REDACTED",
        "n": 1,
    }
