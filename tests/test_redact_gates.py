"""The quick tests before redaction's scans change no result: each scan skipped by one
(a name holding no credential word, no flag's word, no tool's or scheme's word) would
have replaced nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import _fuzz
import pytest
from _budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import asynctrace as at
from asynctrace import _redact, _redact_pairs
from asynctrace._redact import redact_text

_OPEN = re.compile("")  # matches anywhere: the gate lets everything through


class _Folded(str):
    """A text whose case-folded copy holds every word (the word tests always pass)."""

    def casefold(self) -> str:
        return "mysql mariadb sshpass docker bearer"


@contextmanager
def _gates_open() -> Iterator[None]:
    name_gate, flag = _redact_pairs._name_gate, _redact_pairs._flag
    _redact_pairs._name_gate = lambda: _OPEN.search  # type: ignore[assignment]
    _redact_pairs._flag = lambda: (flag()[0], _OPEN)  # type: ignore[assignment]
    try:
        yield
    finally:
        _redact_pairs._name_gate, _redact_pairs._flag = name_gate, flag


def _ungated(text: str) -> str:
    with _gates_open():
        return _redact.redact_text(_Folded(text))


# Words that make names, flags and commands, credential or not, and the glue between.
_WORDS = [
    "token", "Authorization", "X-Session", "session", "Bearer", "bearer", "BEARER", "passcode",
    "X-Passcode", "sessionid", "JSESSIONID", "Client-Assertion", "client_assertion",
    "%74oken", "%70assword", "api_keys", "Secrets", "password2", "secretAccessKey",
    "spring.datasource.password", "cookie", "Set-Cookie", "jwt", "sig", "sigma", "author",
    "max_tokens", "tokenizer", "eos_token", "mysql", "mysqldump", "MariaDB", "sshpass",
    "docker", "login", "-p", "-phunter2", "-u", "--user", "--password", "--api-key",
    "--max-tokens", "curl", "bob:pw", "http://u:pw@h/x", "map[", "self.token", "hunter2",
    "value", "plain", "x", "1", "\u017f\u017fhpa\u017f\u017f", "beaRer", "rollcode",
    "myrollcode", "Rollcode-Id", "sk", "task", "x_sk", "Client-Assertion-Id",
]  # fmt: skip
_GLUE = [
    "", " ", "=", ": ", ":", "==", "'", '"', "\\n", "\\r\\n", "\n", ", ", "(", ")", "[", "]",
    "-", "_", ".",
]  # fmt: skip
_texts = st.lists(st.sampled_from(_WORDS) | st.sampled_from(_GLUE), max_size=24).map("".join)


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(400, 60_000), deadline=None)
@given(_texts)
def test_fuzz_the_gates_change_no_result(text: str) -> None:
    assert redact_text(text) == _ungated(text)


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(400, 60_000), deadline=None)
@given(_texts)
def test_fuzz_the_gates_change_no_result_with_registered_words(text: str) -> None:
    at.register_secret_words(["rollcode", "client_assertion", "sk"])
    assert redact_text(text) == _ungated(text)


@pytest.mark.parametrize(
    "text",
    [
        "X-Session: abc",
        "Client-Assertion: abc",
        "%74oken=abc",
        "sshpass -p hunter2",
        "\u017f\u017fhpa\u017f\u017f -p hunter2",  # long s: an ignored case matches it
        "BEARER abc",
        "curl -u bob:pw http://h/",
        "run --api-key abc",
        "Rollcode-Id: abc",
    ],
)
def test_a_gated_form_is_still_redacted(text: str) -> None:
    at.register_secret_words(["rollcode", "client_assertion"])
    assert redact_text(text) == _ungated(text) != text
