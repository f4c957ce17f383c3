"""URL attributes: the plain-URL shortcut never skips a rule, and every start path redacts.

A request's URL (``http://10.0.0.7:8000/generate``) is kept without the text
rules when no rule could change it; these tests hold the shortcut to that,
against the rules themselves on random URL-like text.
"""

from __future__ import annotations

import random

import pytest

import asynctrace as at
from asynctrace import _spans
from asynctrace._redact import redact_text
from asynctrace._redact_urls import redact_query
from asynctrace._url_attributes import plain_url, redact_url_value
from asynctrace.testing import capture_spans

PROVIDERS = ["fast", "sdk"]

# Pieces the rules look for (secret names, schemes, flags, tools) and URL characters.
_WORDS = [
    "http://", "https://", "ws://", "wss://", "ftp://", "token", "password", "passwd",
    "Bearer", "bearer", "Basic", "-u", "--user", "-p", "mysql", "sshpass", "docker",
    "login", "secret", "api_key", "key", "auth", "sig", "AWS_SECRET_ACCESS_KEY",
    "-----BEGIN", "u:p", "127.0.0.1", "8080", ":", "/", "//", "-", "_", ".", "~", "+",
    "!", "$", "*", ",", "&", "[", "]", "::1", "%3A", "\\/", "Authorization", "jwt", "pwd",
    "?token=x", "=", "#", ";", "@", "%", " ", "(", "'",
]  # fmt: skip
_CHARS = "abcXYZ019-_.~/:+!$*,&[]"


def _url_like(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 8)):
        if rng.random() < 0.6:
            parts.append(rng.choice(_WORDS))
        else:
            parts.append("".join(rng.choice(_CHARS) for _ in range(rng.randint(1, 6))))
    return "".join(parts)


def test_text_the_shortcut_keeps_is_text_no_rule_changes() -> None:
    """Of 60,000 random URL-like texts, every one called plain is unchanged by the text
    rules and the query rules; and the shortcut is taken often enough to matter."""
    rng = random.Random(6)
    plain = 0
    for _ in range(60_000):
        text = _url_like(rng)
        if plain_url(text):
            plain += 1
            assert redact_text(text) == text, text
            assert redact_query(text) == text, text
    assert plain > 5_000


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ("http://10.0.0.7:8000/generate", True),
        ("https://rollout-3.internal/v1/items/17", True),
        ("/items/1", True),
        ("http://h:8080", True),
        ("http://bob:pw@h/x", False),
        ("http://h/x?token=abc", False),
        ("http://h/x#frag", False),
        ("http://h/x;jsessionid=1", False),
        ("http://h/next/http%3A%2F%2Fbob%3Apw%40h", False),
        ("http://[::1]:80/", False),
        ("HTTP://h/", False),
        ("ftp://h/", False),
        ("http://h/a:b", False),
        ("http://h/mysql -pX", False),
    ],
)
def test_what_the_shortcut_takes(text: str, plain: bool) -> None:
    assert plain_url(text) is plain
    if plain:
        assert redact_url_value("url.full", text) is text  # kept, not rebuilt


@pytest.mark.parametrize(
    "url", ["http://auth:8080/v1", "http://token-service:8080/x", "ws://secrets.local:9000/"]
)
def test_a_host_named_like_a_credential_keeps_its_port_and_path(url: str) -> None:
    """In text, ``name:value`` right after ``://`` is a host and its port (the URL rule
    has taken any userinfo away): not a credential pair."""
    message = f"Cannot connect to {url} (refused)"
    assert redact_text(message) == message
    assert redact_text(f"GET {url}?token=abc") == f"GET {url}?token=REDACTED"
    assert redact_text("token:abc") == "token:REDACTED"  # a pair elsewhere still is one


@pytest.mark.parametrize("provider", PROVIDERS)
def test_start_span_redacts_url_attributes_every_time(provider: str) -> None:
    """The second and later ``start_span`` of a group (its cached stamps) redact as the
    first does."""
    secret = {"url.full": "http://bob:pw@h/x?token=abc", "n": 1}
    with capture_spans("per_prompt", provider=provider) as spans:
        for _ in range(3):
            at.end_span(at.start_span("per_prompt", "GET", attributes=secret))
        with at.iteration_scope(4):
            at.end_span(at.start_span("per_prompt", "GET", attributes=secret))
    assert [span.attributes["url.full"] for span in spans] == ["http://h/x?token=REDACTED"] * 4
    assert all(span.attributes["n"] == 1 for span in spans)
    assert secret["url.full"] == "http://bob:pw@h/x?token=abc"  # the caller's dict untouched


@pytest.mark.parametrize("provider", PROVIDERS)
def test_start_span_trusts_a_caller_that_redacted_its_urls(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``urls_redacted=True`` (the HTTP integrations, which redact with their own secret
    keys) skips the check on the fast provider: what is given is recorded. The SDK
    provider's spans check every attribute they are given, as documented."""
    monkeypatch.setattr(_spans, "_EXTRA_WORDS", set())  # no words of the program's own
    given = {"url.full": "http://h/x?sig=kept-by-the-caller"}
    with capture_spans("per_prompt", provider=provider) as spans:
        for step in range(3):  # a new scope state each time: the group's first span in it
            with at.iteration_scope(step):
                for _ in range(2):
                    span = at.start_span("per_prompt", "GET", attributes=given, urls_redacted=True)
                    at.end_span(span)
    recorded = [span.attributes["url.full"] for span in spans]
    if provider == "fast":
        assert recorded == [given["url.full"]] * 6
    else:
        assert recorded == ["http://h/x?sig=REDACTED"] * 6


def test_the_shortcut_reads_a_long_url_once() -> None:
    """A long host and path with a rule's character at the end (a remote client's Host
    header and query, say) cost one pass: sixteen times the text, not 256 times the time
    (the best of 9 runs each, the two sizes alternating)."""
    import time

    texts = {n: "http://" + "a" * n + "/" + "b" * n + "?" for n in (2_000, 32_000)}
    best = dict.fromkeys(texts, float("inf"))
    for _ in range(9):
        for n, text in texts.items():
            start = time.perf_counter()
            assert not plain_url(text)
            best[n] = min(best[n], time.perf_counter() - start)
    assert best[32_000] / best[2_000] < 64


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_programs_own_secret_words_overrule_urls_redacted(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the program has registered secret words (which a caller's own keys may not
    hold), ``urls_redacted=True`` no longer skips the check: the URL is redacted."""
    monkeypatch.setattr(_spans, "_EXTRA_WORDS", {"rolloutcode"})  # as register_secret_words
    given = {"url.full": "http://h/x?sig=kept-by-the-caller"}
    with capture_spans("per_prompt", provider=provider) as spans:
        for step in range(2):
            with at.iteration_scope(step):
                for _ in range(2):
                    span = at.start_span("per_prompt", "GET", attributes=given, urls_redacted=True)
                    at.end_span(span)
    assert [span.attributes["url.full"] for span in spans] == ["http://h/x?sig=REDACTED"] * 4
