"""Words given to ``register_secret_words`` (an HTTP client's ``secret_keys``): every one counts.

A client's ``url.full`` redaction honours any non-empty secret key; the
exception text recorded of the same request must honour it too, short ones
(``sk``) included. Bad arguments and too many words fail loudly rather than
being dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from asynctrace_contrib._http import SecretKeys, redact_url
from asynctrace_contrib.aiohttp_client import client_middleware, trace_config

import asynctrace as at
from asynctrace import _secret_words
from asynctrace.testing import capture_spans

LIVE = "live_abc123"


def test_a_clients_short_secret_key_redacts_the_exception_it_raises_later() -> None:
    """``secret_keys=["token", "sk", "pat"]``: ``sk``'s value was in the status and in
    ``exception.message`` of a span recording ``raise_for_status()``'s error."""
    trace_config(secret_keys=["token", "sk", "pat"])
    message = f"403, message='Forbidden', url='https://api.example/v1?sk={LIVE}&pat=ghp_xyz789'"
    with capture_spans("all") as captured:
        with pytest.raises(RuntimeError), at.managed_span("generation", "rollout"):
            raise RuntimeError(message)
    (span,) = captured.spans
    expected = "403, message='Forbidden', url='https://api.example/v1?sk=REDACTED&pat=REDACTED'"
    assert span.status.description == f"RuntimeError: {expected}"
    assert span.events[0].attributes is not None
    assert span.events[0].attributes["exception.message"] == expected


@pytest.mark.parametrize(
    "url",
    [
        f"https://h/v1?sk={LIVE}&n=1",
        f"https://h/v1?SK={LIVE}&task=t-9&n=1",
        f"https://h/v1?x_sk={LIVE}",
        f"https://h/v1?xsk={LIVE}",
        f"https://h/v1?%73k={LIVE}",
        f"https://h/v1;sk={LIVE}/x?n=1",
        f"https://h/v1?q={LIVE}&seq=2&a=3",
    ],
)
def test_a_url_in_exception_text_loses_what_url_full_loses(url: str) -> None:
    """Short keys match a URL's query keys as the client's ``url.full`` matches them."""
    keys = ["sk", "Q"]
    client_middleware(secret_keys=keys)
    full = redact_url(url, SecretKeys(keys))
    text = at.redact_text(f"GET {url} failed")
    assert LIVE not in full
    assert LIVE not in text
    if "%" not in url:  # (url.full writes a percent-encoded key decoded)
        assert text == f"GET {full} failed"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"sk={LIVE} n=1", "sk=REDACTED n=1"),
        (f"params: a=1&x_sk={LIVE}", "params: a=1&x_sk=REDACTED"),
        (f"SK-live={LIVE}", "SK-live=REDACTED"),
        (f"{{'sk': '{LIVE}'}}", "{'sk': 'REDACTED'}"),
        (f'{{"sk": "{LIVE}"}}', '{"sk": "REDACTED"}'),
        (f"headers [('sk', '{LIVE}')]", "headers [('sk', 'REDACTED')]"),
        (f"cmd --sk {LIVE} -v", "cmd --sk REDACTED -v"),
        (f"['run', '--sk', '{LIVE}']", "['run', '--sk', 'REDACTED']"),
        # glued to a letter or digit, outside a URL: an ordinary name
        ("task=t-9 risk=0.5 desk='a' --ask 3", "task=t-9 risk=0.5 desk='a' --ask 3"),
    ],
)
def test_a_short_word_counts_in_free_text_where_a_delimiter_anchors_it(
    text: str, expected: str
) -> None:
    at.register_secret_words(["sk"])
    assert at.redact_text(text) == expected


@pytest.mark.parametrize(
    ("words", "named"),
    [
        ("mytok", "got str 'mytok'; write ['mytok'] for one word"),
        (b"mytok", "got bytes b'mytok'"),
        (5, "got int 5"),
        (None, "got NoneType None"),
        (["sess", 3], "got int 3 among them"),
        (["sess", ""], "got str '' among them"),
        (["sess", b"sk"], "got bytes b'sk' among them"),
    ],
)
def test_bad_words_raise_naming_the_argument_type_and_what_is_accepted(
    words: object, named: str
) -> None:
    """A bare string was read as its characters (each too short: nothing registered), and
    other items were dropped without a word."""
    before = set(_secret_words._EXTRA_WORDS)
    with pytest.raises(at.ConfigurationError) as raised:
        at.register_secret_words(words)  # type: ignore[arg-type]
    message = str(raised.value)
    assert message.startswith("register_secret_words: words: expected an iterable of words")
    assert "(non-empty str)" in message
    assert named in message
    assert before == set(_secret_words._EXTRA_WORDS)  # none of them, "sess" included
    assert at.redact_text("sess=abc123") == "sess=abc123"


def test_a_word_past_the_limit_raises_and_adds_none() -> None:
    """The 65th word was dropped without a word: its values stayed in exception text."""
    free = _secret_words.MAX_SECRET_WORDS - len(_secret_words._EXTRA_WORDS)
    at.register_secret_words([f"filler{i:02d}" for i in range(free)])
    at.register_secret_words(["filler00", "mytoken", "filler01x"])  # already secret-like: fine
    with pytest.raises(at.ConfigurationError) as raised:
        at.register_secret_words(["zzsess", "yy"])
    message = str(raised.value)
    assert "at most 64 secret words" in message
    assert "2 more (yy, zzsess) would make 66: none of them was added" in message
    assert at.redact_text("failed: https://h/x?zzsess=abc123&yy=abc456") == (
        "failed: https://h/x?zzsess=abc123&yy=abc456"
    )
    assert at.redact_text("failed: https://h/x?filler00=abc123") == (
        "failed: https://h/x?filler00=REDACTED"
    )
    with pytest.raises(at.ConfigurationError, match=r"^secret_keys: register_secret_words: "):
        trace_config(secret_keys=["token", "zzsess"])


_MEGABYTE = 1_000_000


def _seconds(text: str) -> float:
    started = time.perf_counter()
    at.redact_text(text)
    return time.perf_counter() - started


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "sk=" * (n // 3),
        lambda n: "x_sk" * (n // 4) + "=",
        lambda n: "ask=" * (n // 4),
        lambda n: "--sk " * (n // 5),
        lambda n: "--ask" * (n // 5),
        lambda n: "'sk': " * (n // 6),
        lambda n: "http://h/?" + "xsk=a&" * (n // 6),
    ],
)
def test_short_words_keep_redaction_linear_on_a_megabyte(make: Callable[[int], str]) -> None:
    """1 MB takes about four times what 256 KB takes (a quadratic pattern, sixteen).

    A ratio, not a time: a loaded host slows both alike. One slow measure is taken again.
    """
    at.register_secret_words(["sk", "q"])
    for _ in range(2):
        quarter, full = _seconds(make(_MEGABYTE // 4)), _seconds(make(_MEGABYTE))
        if full < max(8 * quarter, 0.5):
            break
    assert full < max(8 * quarter, 0.5), f"256 KB in {quarter:.3f} s, 1 MB in {full:.3f} s"
    assert full < 10.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("sess: abc123", "sess: REDACTED"),
        ("X-Sess: abc123", "X-Sess: REDACTED"),
        ("sess:abc123", "sess:REDACTED"),
        ("X-SK: abc123", "X-SK: REDACTED"),
        ("SessError: not a header", "SessError: not a header"),
        ("task: 5", "task: 5"),
    ],
)
def test_a_registered_word_names_a_header_whose_value_is_redacted(
    text: str, expected: str
) -> None:
    """``Name: value`` text, whose rule for the default words is a credential word among
    the name's words, takes the registered words the same way."""
    at.register_secret_words(["sess", "sk"])
    assert at.redact_text(text) == expected
