"""Secret shapes in exception text: quoted header values, argv flags, PEM keys, odd userinfo.

Each case is a credential as real code puts it into an exception message: a
config parser quoting ``password: "..."``, a ``CalledProcessError`` naming the
command line (``'--password', '...'``, curl's ``-u bob:...``), a key loader
echoing its PEM text, a database URL whose password holds a quote or a space.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.trace import StatusCode

import asynctrace as at
from asynctrace._credential_names import is_credential_key
from asynctrace._exception_text import exception_reason
from asynctrace._redact import redact_text
from asynctrace._secret_words import REDACTED, SECRET_WORDS
from asynctrace.testing import capture_spans

# -- quoted header values ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: 'Basic dXNlcjpwYXNz' refused", f"Authorization: '{REDACTED}' refused"),
        ('X-Api-Key: "abc123456"', f'X-Api-Key: "{REDACTED}"'),
        ('config error: password: "hunter2xyz"', f'config error: password: "{REDACTED}"'),
        ("password:'hunter2xyz'", f"password:'{REDACTED}'"),
        ("pwd: 'hunter2xyz' rejected", f"pwd: '{REDACTED}' rejected"),
        ("X-Api-Key: b'abc123456'", f"X-Api-Key: b'{REDACTED}'"),
        ('X-Api-Key: "abc 123 456', f'X-Api-Key: "{REDACTED}"'),  # unterminated: its line
        ('Cookie: sid="abc123456"; theme=dark', f"Cookie: {REDACTED}"),
        (
            'Authorization: Digest username="bob", response="6629fae49393a05397450978507c4ef1"',
            f"Authorization: {REDACTED}",
        ),
        ("['-H', 'X-Api-Key: \"abc123456\"', '-v']", f"['-H', 'X-Api-Key: \"{REDACTED}\"', '-v']"),
        ('password: "hunter2xyz"\nnext line', f'password: "{REDACTED}"\nnext line'),
    ],
)
def test_a_quoted_credential_header_value_goes_whole(text: str, expected: str) -> None:
    """A value starting with a quote, or holding ``="..."``, kept all or part of itself."""
    assert redact_text(text) == expected


def test_plain_quoted_header_values_stay() -> None:
    """Only credential names lose a quoted value: a content type or an error name keeps it."""
    text = "Content-Type: \"text/plain\" KeyError: 'token_count' Accept: 'a=\"b\"'"
    assert redact_text(text) == text


# -- one list of secret words -----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "403, message='Forbidden', url='http://h/x?pwd=hunter2xyz'",
        "403, message='Forbidden', url='http://h/x?passphrase=hunter2xyz'",
        "403, message='Forbidden', url='http://h/x?jwt=eyJhbGciOi.x.hunter2xyz'",
        "403, message='Forbidden', url='http://h/x;jsessionid=hunter2xyz'",
        "403, message='Forbidden', url='http://h/x?PHPSESSID=hunter2xyz'",
        "403, message='Forbidden', url='http://h/x?X-Amz-Signature=hunter2xyz'",
        "MYSQL_PWD=hunter2xyz mysql -h db",
        "{'passphrase': 'hunter2xyz'}",
        "JWT: hunter2xyz",
    ],
)
def test_every_default_secret_key_is_secret_in_exception_text(text: str) -> None:
    """``pwd``, ``passphrase``, ``jwt``, ``jsessionid`` and ``sessid`` counted only once an
    HTTP integration had registered its keys: a fresh interpreter without one left them."""
    code = (
        "import sys; from asynctrace._redact import redact_text;"
        "sys.stdout.write(redact_text(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, text], capture_output=True, text=True, check=True, timeout=60
    )
    assert "hunter2xyz" not in done.stdout
    assert REDACTED in done.stdout


def test_secret_words_are_the_http_default_secret_keys() -> None:
    """The words exception text calls secret and the HTTP integrations' defaults are one list."""
    http = pytest.importorskip("asynctrace_contrib._http")
    assert set(SECRET_WORDS) == set(http.DEFAULT_SECRET_KEYS)


@pytest.mark.parametrize(
    ("key", "credential"),
    [
        ("signature", True),
        ("x_amz_signature", True),
        ("requestSignature", True),
        ("signature_version", False),
        ("pwd", True),
        ("passenger", False),
        ("bypass", False),
    ],
)
def test_a_signature_key_is_a_credential(key: str, credential: bool) -> None:
    """``signature`` is a credential name, as a word of the key's end only."""
    assert is_credential_key(key) is credential


# -- command lines ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "kept"),
    [
        (["mysql", "--password", "hunter2xyz", "-u", "root"], ["'-u', 'root'"]),
        (["mysql", "--password=hunter2xyz", "db"], ["'db'"]),
        (["tool", "--api-key", "hunter2xyz", "--output", "out.txt"], ["'--output', 'out.txt'"]),
        (["tool", "--client-secret", "hunter2xyz"], ["'tool'"]),
        (["curl", "-u", "bob:hunter2xyz", "https://h/"], ["'https://h/'"]),
        (["curl", "--user", "bob:hunter2xyz", "https://h/"], ["'https://h/'"]),
    ],
)
def test_a_failed_commands_secret_arguments_are_redacted(argv: list[str], kept: list[str]) -> None:
    """``CalledProcessError`` names its argv: the item after a secret-like flag, and the
    ``user:pass`` of curl's ``-u``, were recorded as given."""
    error = subprocess.CalledProcessError(1, argv)
    reason = exception_reason(type(error), error)
    assert "hunter2xyz" not in reason
    assert REDACTED in reason
    for piece in kept:
        assert piece in reason


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Command 'mysql --password hunter2xyz -h db' failed",
            f"Command 'mysql --password {REDACTED} -h db' failed",
        ),
        ("curl --token=hunter2xyz https://h/", f"curl --token={REDACTED} https://h/"),
        ("curl -u bob:hunter2xyz https://h/", f"curl -u {REDACTED} https://h/"),
        ("curl --user bob:hunter2xyz https://h/", f"curl --user {REDACTED} https://h/"),
        ('run --secret "two words" now', f'run --secret "{REDACTED}" now'),
        ("[b'--password', b'hunter2xyz']", f"[b'--password', b'{REDACTED}']"),
    ],
)
def test_a_secret_flags_value_is_redacted_in_a_command_line(text: str, expected: str) -> None:
    """``--password x``, ``--token=x``, ``-u user:pass``: the value goes, the flag stays."""
    assert redact_text(text) == expected


def test_ordinary_flags_keep_their_values() -> None:
    """A flag that names no secret, ``-u`` without a ``:``, and a dash inside a word stay."""
    text = "git log --format %H -u alice --since 2d step-runner --verbose x"
    assert redact_text(text) == text


def test_a_real_failed_command_is_recorded_without_its_password() -> None:
    """A real ``subprocess.run(check=True)`` failing inside a span, on both providers."""
    for provider in ("fast", "sdk"):
        with capture_spans("all", provider=provider) as captured:
            with pytest.raises(subprocess.CalledProcessError), at.managed_span("setup", "migrate"):
                subprocess.run(
                    [sys.executable, "-c", "raise SystemExit(3)", "--password", "hunter2xyz"],
                    check=True,
                    timeout=60,
                )
        (span,) = captured.spans
        (event,) = [e for e in span.events if e.name == "exception"]
        assert span.status.status_code is StatusCode.ERROR
        recorded = [
            str(span.status.description),
            str(event.attributes["exception.message"]),
            str(event.attributes["exception.stacktrace"]),
        ]
        for text in recorded:
            assert "hunter2xyz" not in text
        assert f"'--password', '{REDACTED}'" in recorded[1]


# -- PEM private keys -------------------------------------------------------------

_KEY_BODY = "MIIEpAIBAAKCAQEA7hunter2xyz\nZq9+/abcDEF==\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"key -----BEGIN RSA PRIVATE KEY-----\n{_KEY_BODY}-----END RSA PRIVATE KEY----- end",
            f"key {REDACTED} end",
        ),
        (
            f"-----BEGIN PRIVATE KEY-----\n{_KEY_BODY}-----END PRIVATE KEY-----",
            REDACTED,
        ),
        (  # a repr: escaped line breaks
            "ValueError('-----BEGIN OPENSSH PRIVATE KEY-----\\nMIIhunter2xyz\\n"
            "-----END OPENSSH PRIVATE KEY-----\\n')",
            f"ValueError('{REDACTED}\\n')",
        ),
        (  # cut short: to the end of the text
            f"loading -----BEGIN EC PRIVATE KEY-----\n{_KEY_BODY}",
            f"loading {REDACTED}",
        ),
        (  # an END line of another label does not end it
            f"-----BEGIN ENCRYPTED PRIVATE KEY-----\n{_KEY_BODY}-----END RSA PRIVATE KEY-----",
            REDACTED,
        ),
    ],
)
def test_a_pem_private_key_is_replaced_whole(text: str, expected: str) -> None:
    """A key loader's error echoing its PEM text kept every line of the key."""
    assert redact_text(text) == expected


def test_a_certificate_and_text_around_two_keys_stay() -> None:
    """A certificate is no secret; what lies between two keys is kept."""
    cert = "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----"
    key = f"-----BEGIN PRIVATE KEY-----\n{_KEY_BODY}-----END PRIVATE KEY-----"
    assert redact_text(f"{cert} {key} and {key}!") == f"{cert} {REDACTED} and {REDACTED}!"


# -- userinfo holding a quote or a space ------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgres://user:p'ss@h/db", "postgres://h/db"),
        ('postgres://user:p"ss@h/db', "postgres://h/db"),
        ("postgres://user:pa ss@h/db", "postgres://h/db"),
        ("url='postgres://user:p'ss@h/db?sslmode=x'", "url='postgres://h/db?sslmode=x'"),
        (
            "connect redis://:two words and more@cache:6379/0 refused",
            "connect redis://cache:6379/0 refused",
        ),
    ],
)
def test_userinfo_with_a_quote_or_a_space_is_removed_to_its_at(text: str, expected: str) -> None:
    """The URL ended at the quote or space, before its ``@``: the password was kept whole."""
    assert redact_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "GET http://host:8080 failed; mail ops@example.com",  # a port, not a password
        "GET 'http://[::1]:8080' failed; mail ops@example.com",
        "fetch http://h/x failed; mail ops@example.com",  # no ":" in the netloc
        "http://u:x\nmail ops@example.com",  # the "@" is on another line
    ],
)
def test_an_at_later_in_the_text_does_not_cost_it_otherwise(text: str) -> None:
    """A port, a URL with a path, or an ``@`` on another line: the text stays."""
    assert redact_text(text) == text


def test_an_at_beyond_the_next_url_is_not_taken() -> None:
    """``http://u:x 'https://ops@h2/'``: the ``@`` belongs to the second URL."""
    assert redact_text("a http://u:x then https://ops@h2/ b") == "a http://u:x then https://h2/ b"


@pytest.mark.parametrize("flag", ["--user", "--USER", "-u", "--password"])
def test_a_flag_before_a_header_leaves_the_header_value_redacted(flag: str) -> None:
    """A flag's value that is a header name does not hide the header from its own rule
    (found by ``nox -s fuzz``: ``--user Authorization: Basic ...`` kept the credential)."""
    assert "Zq9SECRETv7" not in redact_text(f"{flag} Authorization: Basic Zq9SECRETv7")
