"""Credential forms written inside other text: escaped line breaks and quotes (a repr, JSON
inside JSON), encoded URLs, Go's maps, odd spacing; and names that are data (tokenizers)."""

from __future__ import annotations

import json

import pytest

import asynctrace as at
from asynctrace import _payloads
from asynctrace._payloads import plain_payload

SECRET = "Zq9SECRETv7"

# Each form, as the middle line of a text that is then repr()'d or JSON-encoded: its
# line breaks become the two characters "\n", glued to the form's first word.
FORMS = [
    f"Authorization: Basic {SECRET}",
    f"Cookie: sid={SECRET}",
    f"JWT: {SECRET}",
    f"Auth: {SECRET}",
    f"Credentials: {SECRET}",
    f"Bearer {SECRET}",
    f"--password {SECRET}",
    f"-u bob:{SECRET}",
    f"mysql -p{SECRET}",
    f"password={SECRET}",
]


@pytest.mark.parametrize("encode", [repr, json.dumps], ids=["repr", "json"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("before", ["password=pw1", "token=pw1"])
def test_an_unquoted_value_ends_where_the_next_header_line_starts(
    form: str, encode: object, before: str
) -> None:
    """An unquoted value ends at an escaped line break before the next ``Name: ``, so the
    credential in that line is still read as one."""
    text = encode(f"{before}\n{form}\nHost: env")  # type: ignore[operator]
    redacted = at.redact_text(text)
    assert SECRET not in redacted
    assert "pw1" not in redacted
    assert redacted.endswith(encode("\nHost: env")[1:])  # type: ignore[operator]


@pytest.mark.parametrize("encode", [repr, json.dumps], ids=["repr", "json"])
@pytest.mark.parametrize("form", FORMS)
def test_a_form_after_an_escaped_line_break_is_redacted(form: str, encode: object) -> None:
    text = encode(f"first line\n{form}\nlast line")  # type: ignore[operator]
    redacted = at.redact_text(text)
    assert SECRET not in redacted
    assert redacted.startswith(text[:12])  # the quote and "first line" are kept


def test_a_raw_request_in_an_exception_args_loses_its_credentials_only() -> None:
    """``str(exc)`` of an exception with two arguments is their tuple's repr: header lines
    joined by escaped CRLFs. Each credential goes; the next header stays."""
    exc = ValueError("upstream rejected", f"GET / HTTP/1.1\r\nAuthorization: Basic {SECRET}\r\n"
                     f"Cookie: sid={SECRET}\r\nHost: env\r\n\r\n")  # fmt: skip
    assert at.redact_text(str(exc)) == (
        "('upstream rejected', 'GET / HTTP/1.1\\r\\nAuthorization: REDACTED\\r\\n"
        "Cookie: REDACTED\\r\\nHost: env\\r\\n\\r\\n')"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # JSON inside a JSON string
            json.dumps({"body": json.dumps({"user": "bob", "password": SECRET})}),
            '{"body": "{\\"user\\": \\"bob\\", \\"password\\": \\"REDACTED\\"}"}',
        ),
        ('{\\"api_key\\":\\"' + SECRET + '\\"}', '{\\"api_key\\":\\"REDACTED\\"}'),
        (
            json.dumps({"dsn": f'host=db password="{SECRET}" dbname=x'}),
            '{"dsn": "host=db password=\\"REDACTED\\" dbname=x"}',
        ),
        (
            json.dumps({"h": f'Authorization: "Basic {SECRET}"'}),
            '{"h": "Authorization: \\"REDACTED\\""}',
        ),
        (  # a quote inside a password, one level in: \\\" is a character of it
            json.dumps({"body": json.dumps({"password": 'pa"ss' + SECRET})}),
            '{"body": "{\\"password\\": \\"REDACTED\\"}"}',
        ),
        (  # the next pair of a JSON-in-JSON object is its own
            json.dumps({"body": json.dumps({"h": "Authorization: Basic abc", "status": 401})}),
            '{"body": "{\\"h\\": \\"Authorization: REDACTED\\", \\"status\\": 401}"}',
        ),
        (
            json.dumps({"h": f'Cookie: theme="dark"; session={SECRET}'}),
            '{"h": "Cookie: REDACTED"}',
        ),
        (
            json.dumps({"h": f'Authorization: Basic ab"{SECRET}'}),
            '{"h": "Authorization: REDACTED"}',
        ),
        (json.dumps({"h": f'sent Bearer "{SECRET}"'}), '{"h": "sent Bearer \\"REDACTED\\""}'),
        (  # escaped slashes escaped again
            json.dumps({"body": '{"dsn":"postgres:\\/\\/bob:' + SECRET + '@db\\/prod"}'}),
            '{"body": "{\\"dsn\\":\\"postgres:\\\\/\\\\/db\\\\/prod\\"}"}',
        ),
    ],
)
def test_escaped_quotes_and_slashes(text: str, expected: str) -> None:
    assert at.redact_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # urllib.parse.quote's default keeps "/"
            f"redirect to https%3A//bob%3A{SECRET}%40h.example/x%3Ftoken%3D{SECRET}%26n%3D1",
            "redirect to https%3A//h.example/x%3Ftoken%3DREDACTED%26n%3D1",
        ),
        (  # encodeURIComponent leaves "!" and "*" as they are
            f"redirect to https%3A%2F%2Fbob%3A{SECRET}!*%40h.example%2Fx",
            "redirect to https%3A%2F%2Fh.example%2Fx",
        ),
    ],
)
def test_urls_encoded_whole_as_encoders_write_them(text: str, expected: str) -> None:
    assert at.redact_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"login failed: password=Tr0ub'{SECRET} user=bob",
            "login failed: password=REDACTED user=bob",
        ),
        # a quote inside an unquoted password, before punctuation too (not a quoted pair)
        (
            f"login failed: password=Tr0ub'#4dor{SECRET} user=bob",
            "login failed: password=REDACTED user=bob",
        ),
        (f"password=Tr0ub'.4dor{SECRET}", "password=REDACTED"),
        (f"--password pa'$$word{SECRET}", "--password REDACTED"),
        (f"Authorization: Basic ab'-cd{SECRET}", "Authorization: REDACTED"),
        (f'Authorization: Basic ab"{SECRET}', "Authorization: REDACTED"),
        (f"--password Tr0ub'{SECRET} --user bob", "--password REDACTED --user bob"),
        (f"'token=abc{SECRET}', 'n'", "'token=REDACTED', 'n'"),  # a quote that ends it
        (
            f"headers map[Authorization:[Basic {SECRET}] Content-Type:[application/json]]",
            "headers map[Authorization:REDACTED Content-Type:[application/json]]",
        ),
        (f"password : {SECRET}", "password : REDACTED"),
        (f"X-Api-Key\t: {SECRET}", "X-Api-Key\t: REDACTED"),
        (f"spring.datasource.password: {SECRET}", "spring.datasource.password: REDACTED"),
        (f"secretAccessKey: {SECRET}", "secretAccessKey: REDACTED"),
        (f"SecretKey: {SECRET}", "SecretKey: REDACTED"),
        (f"JSESSIONID: {SECRET}", "JSESSIONID: REDACTED"),
        (f"sent Bearer Token {SECRET} upstream", "sent Bearer Token REDACTED upstream"),
        (f"sent bearer JWT {SECRET}", "sent bearer JWT REDACTED"),
        (f"sent Bearer '{SECRET}'", "sent Bearer 'REDACTED'"),
        (f"sent Bearer ab:{SECRET}", "sent Bearer REDACTED"),
        # what stays: exception names, comparisons, a tokenizer's names and special tokens
        ("fernet.InvalidToken: bad", "fernet.InvalidToken: bad"),
        ("KeyError: 'api_key'", "KeyError: 'api_key'"),
        ("    assert tokens == expected_tokens", "    assert tokens == expected_tokens"),
        ("load tokenizer=Qwen/Qwen2.5-7B", "load tokenizer=Qwen/Qwen2.5-7B"),
        ("--tokenizer /models/tok --max-tokens 512", "--tokenizer /models/tok --max-tokens 512"),
        ("pad_token=None eos_token=</s>", "pad_token=None eos_token=</s>"),
        (f"tokenizer_auth_header={SECRET}", "tokenizer_auth_header=REDACTED"),
        (
            f"tokenizerpassword={SECRET} TOKENIZERTOKEN={SECRET}",
            "tokenizerpassword=REDACTED TOKENIZERTOKEN=REDACTED",
        ),
        # a backslash before a name: a path's separator as well as an escape
        (
            f"failed reading C:\\Users\\bob\\token={SECRET}",
            "failed reading C:\\Users\\bob\\token=REDACTED",
        ),
        (f"HKCU\\Software\\App\\token: {SECRET}", "HKCU\\Software\\App\\token: REDACTED"),
        # a credential header's value runs on over a backslash that ends no header line
        (f"X-Credentials: CORP\\nancy:{SECRET}", "X-Credentials: REDACTED"),
        (f"password: Tr0ub\\n{SECRET}", "password: REDACTED"),
        # HTTPie's name==value
        (
            f"http GET h/v1 access_token=={SECRET} page==2",
            "http GET h/v1 access_token==REDACTED page==2",
        ),
        # quotes that end a value, and code that only looks like a credential
        ("print('token=abc'.split('='))", "print('token=REDACTED'.split('='))"),
        ('log: "X-Api-Key: abc"; status=200', 'log: "X-Api-Key: REDACTED"; status=200'),
        (
            '    headers["Authorization"] = "Bearer " + token',
            '    headers["Authorization"] = "Bearer " + token',
        ),
        (
            "expected 'Bearer ' prefix, got 'Token xyz'",
            "expected 'Bearer ' prefix, got 'Token xyz'",
        ),
        ("    self.token: str = token", "    self.token: str = token"),
    ],
)
def test_forms_with_odd_spacing_quoting_and_names(text: str, expected: str) -> None:
    assert at.redact_text(text) == expected


def test_a_special_token_is_data_an_access_token_a_credential() -> None:
    assert [at.is_credential_key(key) for key in ("eos_token", "pad_token", "mask_token")] == [
        False,
        False,
        False,
    ]
    credentials = (
        "access_token",
        "token",
        "PHPSESSID",
        "jsessionid",
        "video_token",
        "backEndToken",
    )
    assert all(at.is_credential_key(key) for key in credentials)
    assert at.is_credential_key("eos_token", {"eos_token"})  # names given: as given
    assert at.is_credential_key("user_pad_token")  # exactly two words: a tokenizer's


def test_registered_words_name_headers_and_payload_keys() -> None:
    """A registered word counts in a header's name glued to others, with dashes for its
    underscores, and in a session payload's keys, as it counts in ``name=value``."""
    at.register_secret_words(["client_assertion", "mysess"])
    for text in (f"Client-Assertion: {SECRET}", f"X-MySess: {SECRET}", f"mysess2: {SECRET}"):
        assert SECRET not in at.redact_text(text), text
    assert at.redact_text("MySessError: not a header") == "MySessError: not a header"
    assert at.redact_text("x.MySessError: not a header") == "x.MySessError: not a header"
    payload = plain_payload(
        {"client_assertion": SECRET, "mysess": 7, "argv": ["tool", "--mysess", SECRET]}
    )
    assert payload == {
        "client_assertion": "REDACTED",
        "mysess": "REDACTED",
        "argv": ["tool", "--mysess", "REDACTED"],
    }


def test_a_payload_key_judged_before_a_registration_is_judged_again() -> None:
    """Payload keys are remembered (they repeat); a word registered later still counts."""
    assert plain_payload({"rolloutcode": SECRET}) == {"rolloutcode": SECRET}
    at.register_secret_words(["rolloutcode"])
    assert plain_payload({"rolloutcode": SECRET}) == {"rolloutcode": "REDACTED"}


def test_a_registered_word_in_a_data_name_keeps_its_value() -> None:
    at.register_secret_words(["code"])
    assert plain_payload({"code_count": 3, "code": 5}) == {"code_count": 3, "code": "REDACTED"}
    assert at.redact_text("code_count=3 code=5") == "code_count=3 code=REDACTED"
    assert at.redact_text("code_count: 3\nCode-Count: 4") == "code_count: 3\nCode-Count: 4"
    assert at.redact_text(f"x-code: {SECRET}") == "x-code: REDACTED"


def test_a_key_judged_while_words_are_registered_is_not_remembered_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key judged with the old words, the words registered and the cache forgotten (by
    another thread) before the verdict is stored: the stale verdict is not kept."""
    judge = _payloads.is_credential_key

    def racing(key: str) -> bool:
        verdict = judge(key)  # the old words: no credential
        at.register_secret_words(["racecode"])
        _payloads._known_keys()  # another thread's payload forgets the cache
        return verdict

    monkeypatch.setattr(_payloads, "is_credential_key", racing)
    plain_payload({"racecode": SECRET})
    monkeypatch.setattr(_payloads, "is_credential_key", judge)
    assert plain_payload({"racecode": SECRET}) == {"racecode": "REDACTED"}


def test_the_areal_shim_hides_what_registered_words_name() -> None:
    from asynctrace_contrib.areal import _values

    args = {"rollcode": SECRET, "argv": ["tool", "--rollcode", SECRET]}
    assert _values._attributes(args) == {
        "rollcode": SECRET,
        "argv": ["tool", "--rollcode", SECRET],
    }
    at.register_secret_words(["rollcode"])
    assert _values._attributes(args) == {
        "rollcode": "REDACTED",
        "argv": ["tool", "--rollcode", "REDACTED"],
    }


def test_the_areal_shim_does_not_keep_a_verdict_judged_with_old_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from asynctrace_contrib.areal import _values

    judge = at.is_credential_key

    def racing(key: str) -> bool:
        verdict = judge(key)  # the old words: no credential
        if key == "shimrace":
            at.register_secret_words(["shimrace"])
            _values._attributes({"other": 1})  # another thread's args: the caches forgotten
        return verdict

    monkeypatch.setattr(_values.asynctrace, "is_credential_key", racing)
    _values._attributes({"shimrace": SECRET})
    monkeypatch.setattr(_values.asynctrace, "is_credential_key", judge)
    assert _values._attributes({"shimrace": SECRET}) == {"shimrace": "REDACTED"}


def test_a_registered_word_holding_a_default_word_names_payload_keys() -> None:
    """``hftoken`` holds ``token``: free text read it as secret already, but as a key's name
    no default rule does; registered, it is the program's credential there too."""
    assert plain_payload({"hftoken": SECRET}) == {"hftoken": SECRET}
    at.register_secret_words(["hftoken"])
    assert "hftoken" in at.secret_words()
    assert plain_payload({"hftoken": SECRET, "tokens": [1]}) == {
        "hftoken": "REDACTED",
        "tokens": [1],
    }


def test_a_tokenizer_name_registered_later_is_judged_by_the_default_words_only() -> None:
    """Whether a tokenizer's name is data is remembered: it does not hang on the words
    registered when it was first judged."""
    assert at.redact_text("tokenizer_rollcode2=abc") == "tokenizer_rollcode2=abc"
    at.register_secret_words(["rollcode2"])
    assert at.redact_text("tokenizer_rollcode2=abc") == "tokenizer_rollcode2=REDACTED"


@pytest.mark.parametrize(
    "text",
    [
        f"api_keys: {SECRET}",
        f"Secrets: {SECRET}",
        f"password1: {SECRET}",
        f"access_tokens: {SECRET}",
        f"Passwords: {SECRET}",
        f"cookies: sid={SECRET}",
    ],
)
def test_plural_and_numbered_credential_names_are_redacted(text: str) -> None:
    assert SECRET not in at.redact_text(text)


@pytest.mark.parametrize(
    "text", ["prompt_tokens: 512", "tokens: 128", "cache_keys: 5", "response_tokens: [1, 2]"]
)
def test_plural_data_names_keep_their_values(text: str) -> None:
    assert at.redact_text(text) == text


def test_plural_credential_payload_keys_are_redacted_token_ids_kept() -> None:
    payload = {"api_keys": [SECRET], "password2": SECRET, "tokens": [1, 2], "prompt_tokens": 5}
    assert plain_payload(payload) == {
        "api_keys": "REDACTED",
        "password2": "REDACTED",
        "tokens": [1, 2],
        "prompt_tokens": 5,
    }
    assert not at.is_credential_key("keys", {"key"})  # names given are taken as given


PLAIN_SECRET = "Zq9hunter7"  # no secret word in it: a glued one makes no flag of its own


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"curl -ubob:{PLAIN_SECRET} http://h/", "curl -uREDACTED http://h/"),
        (f"curl --proxy-user bob:{PLAIN_SECRET} http://h", "curl --proxy-user REDACTED http://h"),
        (f"mysqldump -p'{PLAIN_SECRET}' db", "mysqldump -p'REDACTED' db"),
        (f"sshpass -p{PLAIN_SECRET} ssh h", "sshpass -pREDACTED ssh h"),
        (f"docker login -p={PLAIN_SECRET} reg", "docker login -p=REDACTED reg"),
        (f"docker login -p{PLAIN_SECRET} reg", "docker login -pREDACTED reg"),
        (f"vault login -token {PLAIN_SECRET}", "vault login -token REDACTED"),
        (f"tool -password={PLAIN_SECRET} -v", "tool -password=REDACTED -v"),
        # kept: a prompt for the password, an argv list's flag, ordinary and data flags
        ("mysql -p db", "mysql -p db"),
        ("['mysql', '-p', 'db']", "['mysql', '-p', 'db']"),
        ("python -u script.py", "python -u script.py"),
        ("run -max_tokens 512 -tokenizer gpt2", "run -max_tokens 512 -tokenizer gpt2"),
        ("the non-token path", "the non-token path"),
    ],
)
def test_command_line_flags_in_every_spelling(text: str, expected: str) -> None:
    assert at.redact_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "loss = -logp_token * adv",
        "return -tokens_per_sec if slow else x",
        "y = -secret_bonus + 3",
        "kl = -sig * x",
        "tail = seq[-units:]",
        "buf[-used:]",
        "ffmpeg -i a.mp4 -keyint_min 25 out.mp4",
        "openssl x509 -in c.pem -pubkey -noout",
    ],
)
def test_math_and_code_with_a_minus_keep_their_operands(text: str) -> None:
    assert at.redact_text(text) == text


@pytest.mark.parametrize("encode", [str, repr, json.dumps], ids=["plain", "repr", "json"])
def test_a_backslash_n_inside_a_password_keeps_it_whole(encode: object) -> None:
    text = encode(f"login failed: password=Tr0ub\\n{PLAIN_SECRET} for user bob")  # type: ignore[operator]
    redacted = at.redact_text(text)
    assert PLAIN_SECRET not in redacted
    assert "for user bob" in redacted


@pytest.mark.parametrize("encode", [repr, json.dumps], ids=["repr", "json"])
@pytest.mark.parametrize(
    "line",
    [
        f"spring.datasource.password: {PLAIN_SECRET}",
        f"map[Authorization:[Bearer {PLAIN_SECRET}]]",
        f'"password": "{PLAIN_SECRET}"',
    ],
)
def test_a_value_ends_before_any_credential_line(line: str, encode: object) -> None:
    text = encode(f"token=pw1\n{line}\nHost: env")  # type: ignore[operator]
    redacted = at.redact_text(text)
    assert PLAIN_SECRET not in redacted
    assert "pw1" not in redacted


@pytest.mark.parametrize("tool", ["mar\u0131adb", "MAR\u0130ADB", "MariaDB"])
def test_a_password_tool_spelled_in_any_case(tool: str) -> None:
    assert PLAIN_SECRET not in at.redact_text(f"{tool} -u root -p{PLAIN_SECRET} db")


@pytest.mark.parametrize(
    "key",
    ["password_2", "password-2", "secret_1", "api_key_2", "OPENAI_API_KEY_2", "access_token2"],
)
def test_a_numbered_credential_key_is_a_credential(key: str) -> None:
    assert at.is_credential_key(key)
    assert plain_payload({key: PLAIN_SECRET}) == {key: "REDACTED"}


@pytest.mark.parametrize("key", ["num_api_keys", "max_access_tokens", "step_2", "tokens_2"])
def test_counts_and_numbered_data_keys_stay_data(key: str) -> None:
    assert not at.is_credential_key(key)


@pytest.mark.parametrize("text", ["tail = seq[-units:n]", "w = tokens[-used:total]"])
def test_a_slice_with_a_minus_is_no_glued_user_flag(text: str) -> None:
    assert at.redact_text(text) == text
