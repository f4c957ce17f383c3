"""Which header names and which keys hold credentials.

:func:`is_credential_header` judges a header's name by its ``-``/``_``
separated words; :func:`is_credential_key` judges a key (of a session
payload, say) by its trailing words, so ``access_token`` is a credential and
``token_count`` is data. Both are cached: names repeat. :func:`is_data_name`
is the one rule by which a name holding a credential word is data anyway
(``max_tokens``, ``token_ids``), for the places that otherwise match the words
anywhere in a name (a ``name=value`` pair of text, a command-line flag).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection
from typing import Final

from ._secret_words import _DEFAULT_NAME, _WORD_SPLIT, _registered_name, _secret_name

__all__ = ["CREDENTIAL_KEYS", "is_credential_header", "is_credential_key", "is_data_name"]

# Header names whose "Name: value" form is a credential: one of these words among
# the "-"/"_"-separated words of the name (not "KeyError: ...", "AuthError: ...").
_HEADER_WORDS: Final = frozenset(
    {
        "authorization",
        "auth",
        "cookie",
        "token",
        "key",
        "apikey",
        "secret",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "jwt",
        "credential",
        "credentials",
        "signature",
        "passwords",
        "secrets",
        "cookies",
        "passphrases",
        "session",
        "authentication",
        "bearer",
        "passcode",
    }
)
# Words that name a credential in the name of a header an HTTP integration records, of
# two words or more ("X-Pin", "X-Api-Pass", "X-Client-Cert", "X-MS-CLIENT-PRINCIPAL"),
# but name data as often in text and keys ("pin_memory: True", "first_pass: done",
# "cert_file: /etc/ssl/ca.pem", "principal_angle: 1.57"), and alone say little.
_QUALIFIED_WORDS: Final = frozenset({"sig", "otp", "pin", "pass", "cert", "principal"})


def is_credential_header(name: str, *, recorded: bool = False) -> bool:
    """Whether the header *name*'s values are credentials (``Private-Token``, ``DD-API-KEY``).

    A credential word among the ``-``/``_``-separated words of *name*, or a
    last word ending in one (``AccessToken``). The rule asynctrace applies to
    ``Name: value`` text it records and to the ``-`` names of a session
    payload's pairs.

    With *recorded*, the rule for a header an HTTP integration is asked to
    record: ``sig``, ``otp``, ``pin``, ``pass``, ``cert`` and ``principal``
    count too, in a name of two words or more (``X-Pin``, ``X-Client-Cert``;
    not ``Pin``). Only there: in text and keys they name data as often
    (``pin_memory: True``, ``first_pass: done``).

    Example:
        >>> is_credential_header("X-Api-Key"), is_credential_header("Content-Type")
        (True, False)
        >>> is_credential_header("X-Pin"), is_credential_header("X-Pin", recorded=True)
        (False, True)
    """
    words = _WORD_SPLIT.split(name.lower())
    if any(word in _HEADER_WORDS for word in words):
        return True
    if recorded and len(words) > 1 and any(word in _QUALIFIED_WORDS for word in words):
        return True
    # "AccessToken: ...", but not a dotted exception name ("fernet.InvalidToken: ...")
    return "." not in name and words[-1].endswith(_GLUED_ENDS)


# The ends of a name's last word that make it a credential glued to other words
# ("AccessToken", "SecretKey", "JSESSIONID"); "key" alone would take "Hotkey".
_GLUED_ENDS: Final = (
    "token", "apikey", "password", "secret", "secretkey", "accesskey", "privatekey",
    "sessionid", "sessid",
)  # fmt: skip


_credential_header = functools.lru_cache(maxsize=1024)(is_credential_header)  # names repeat
CREDENTIAL_KEYS: Final = frozenset(
    ("password", "passwd", "pwd", "passphrase", "secret", "token", "cookie", "auth",
     "authorization", "credential", "credentials", "apikey", "jwt", "signature",
     "api_key", "private_key", "access_key", "secret_key", "set_cookie", "jsessionid",
     "sessid", "phpsessid")
)  # fmt: skip
"""The keys :func:`is_credential_key` treats as credentials by default."""
# Word breaks of a key: anything but a letter or digit, and case changes (apiKey, APIKey).
_KEY_BREAK = re.compile(r"[^0-9A-Za-z]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_LONGEST_KEY = 128  # a longer key is judged by its end


def is_credential_key(key: str, names: Collection[str] = CREDENTIAL_KEYS) -> bool:
    """Whether *key*, or its trailing words, is one of *names* (without case).

    Words break at anything but a letter or digit and at case changes, so
    ``access_token``, ``refreshToken``, ``OPENAI_API_KEY`` and ``X-Api-Key``
    end with credential names; a credential word elsewhere does not count:
    ``session_id``, ``token_count`` and ``prompt_token_ids`` are data. The
    rule of the values asynctrace records under a key (session payloads).

    With the default *names* (:data:`CREDENTIAL_KEYS`), three more rules: a
    tokenizer's special token, one of ``eos``, ``bos``, ``pad``, ``unk``,
    ``sep``, ``cls`` or ``mask`` and then ``token`` (exactly those two words),
    is data; a last word made plural or numbered counts as its singular
    (``api_keys``, ``Secrets``, ``password2``, ``api_key_2``), but ``tokens``
    only after a word naming a credential's kind (``access_tokens``; not
    ``prompt_tokens`` nor ``response_tokens``), ``keys`` only as
    ``api_keys``, ``private_keys`` and the like, and neither after a count
    word (``num_api_keys``); and a key holding a word given to
    :func:`~asynctrace.register_secret_words` is a credential, unless it is
    shaped as data (``code_count``). Names given are taken as given.

    Example:
        >>> is_credential_key("OPENAI_API_KEY"), is_credential_key("token_count")
        (True, False)
        >>> is_credential_key("gen_ai.prompt", {"prompt"})
        True
        >>> is_credential_key("eos_token"), is_credential_key("eos_token", {"eos_token"})
        (False, True)
    """
    if not isinstance(names, frozenset):  # a set or a list: cached by its frozen form
        names = frozenset(names)
    if _is_listed(key[-_LONGEST_KEY:], names):
        return True
    # The default names take the program's registered words too, but for data (code_count).
    return _registered_name(key) and names == CREDENTIAL_KEYS and not _data_shape(key)


@functools.lru_cache(maxsize=4096)  # keys repeat: after the first, a dict lookup
def _is_listed(key: str, names: frozenset[str]) -> bool:
    forms = _forms(names)
    words = _words(key)
    if names == CREDENTIAL_KEYS and _special_token(words):  # a tokenizer's, no credential
        return False
    if any("_".join(words[i:]) in forms for i in range(len(words))):
        return True
    if names != CREDENTIAL_KEYS:  # names given are taken as given
        return False
    single = _singular(words)
    return single is not None and any("_".join(single[i:]) in forms for i in range(len(single)))


# A last word made plural or numbered that still names credentials ("api_keys",
# "Secrets", "password2"), as its singular. Never "tokens" after any word
# ("prompt_tokens" counts, "response_tokens" are ids): only after one that says
# which credential; "keys" names one only after such a word (api_keys, not cache_keys).
_PLURAL_WORDS: Final = {
    "passwords": "password", "passwds": "passwd", "pwds": "pwd", "secrets": "secret",
    "passphrases": "passphrase", "cookies": "cookie", "apikeys": "apikey", "jwts": "jwt",
    "signatures": "signature", "keys": "key", "tokens": "token",
}  # fmt: skip
_TOKEN_KINDS: Final = frozenset(
    ("access", "refresh", "auth", "api", "bearer", "session", "oauth", "id", "csrf", "xsrf")
)
_NUMBERED = re.compile(r"([a-z]+)[0-9]{1,4}")  # "password2", "key2"


def _singular(words: list[str]) -> list[str] | None:
    """*words* with the last one singular or unnumbered, if it is one of those forms: a
    number glued to it or after it (``password2``, ``api_key_2``), a plural (``Secrets``;
    ``keys`` and ``tokens`` not after a count word: ``num_api_keys`` counts)."""
    if len(words) > 1 and words[-1].isdigit() and len(words[-1]) <= 4:
        words = words[:-1]  # password_2, OPENAI_API_KEY_2
    else:
        numbered = _NUMBERED.fullmatch(words[-1]) if words else None
        if numbered is None:
            return _plural(words)
        words = [*words[:-1], numbered.group(1)]
    return _plural(words) or words


def _plural(words: list[str]) -> list[str] | None:
    """*words* with a plural last word made singular (see :func:`_singular`)."""
    single = _PLURAL_WORDS.get(words[-1]) if words else None
    if single is None:
        return None
    if single in ("key", "token") and words[0] in _COUNT_WORDS:  # num_api_keys: a count
        return None
    if single == "token" and (len(words) < 2 or words[-2] not in _TOKEN_KINDS):
        return None
    return [*words[:-1], single]


# The words before "token" that name a tokenizer's special token ("eos_token",
# "pad_token"): text the model reads, never a credential.
_SPECIAL_TOKENS: Final = frozenset(("eos", "bos", "pad", "unk", "sep", "cls", "mask"))


def _special_token(words: list[str]) -> bool:
    """Whether *words* (lower case) are a special token's name: ``eos_token``."""
    return len(words) == 2 and words[1] == "token" and words[0] in _SPECIAL_TOKENS


@functools.lru_cache(maxsize=64)
def _forms(names: frozenset[str]) -> frozenset[str]:
    """*names* as lower-case words joined by ``_``, as :func:`_is_listed` compares them."""
    return frozenset(
        "_".join(word.lower() for word in _KEY_BREAK.split(name) if word) for name in names
    )


# The last words that make a name data whatever it holds before them (a count, an
# index, a size: token_count, prompt_token_ids), and the words before a credential
# word made plural that make it a count (max_tokens, num_keys, cache_keys).
_DATA_LAST: Final = frozenset(
    ("count", "counts", "ids", "idx", "index", "indices", "len", "length", "lengths",
     "size", "sizes", "num", "number", "limit", "limits", "total", "budget", "usage",
     "shape", "dim", "dims")
)  # fmt: skip
_COUNT_WORDS: Final = frozenset(
    ("max", "min", "num", "n", "total", "prompt", "completion", "input", "output", "new",
     "cache", "cached", "generated", "reasoning", "remaining", "context", "special")
)  # fmt: skip
# Which plurals count as data after which words: tokens after any count word (LLM usage:
# prompt_tokens, max_new_tokens); keys only after a true count or "cache" (num_keys,
# cache_keys; "new_keys" may be new API keys). Never passwords, secrets or cookies.
_KEY_COUNTS: Final = frozenset(("max", "min", "num", "n", "total", "cache"))
_PLURALS: Final = {"tokens": _COUNT_WORDS, "keys": _KEY_COUNTS}


def is_data_name(name: str) -> bool:
    """Whether *name*, though it holds a credential word, names data (a count, ids).

    Never a name :func:`is_credential_key` calls a credential. Data is a name
    whose last word (words break as for :func:`is_credential_key`) says what
    kind of data it is (``token_count``, ``prompt_token_ids``, ``key_len``), or a
    credential word made plural after a word that makes it a count
    (``max_tokens``, ``max_new_tokens``, ``num_keys``, ``cache_keys``). The rule
    by which a ``name=value`` pair of text and a command-line flag keep their
    value, as a session payload's key and a nemo-lens attribute key do.

    A tokenizer's names are data too: a name holding a word such as
    ``tokenizer`` or ``detokenize`` and no credential word besides
    (``tokenizer_path``; not ``tokenizer_auth_header``), and, with
    :func:`is_credential_key`'s default names, a special token (``eos_token``).

    Example:
        >>> is_data_name("max_tokens"), is_data_name("token_ids"), is_data_name("api_token")
        (True, True, False)
    """
    if not _data_name(name):
        return False
    # A registered word in a tokenizer's name ("tokenizer_rollcode"): judged afresh, as
    # the words may have been registered after the name was first judged.
    return not (_registered_name(name) and any(map(_TOKENIZER.fullmatch, _words(name))))


@functools.lru_cache(maxsize=4096)  # names repeat
def _data_name(name: str) -> bool:
    return not is_credential_key(name) and _data_shape(name)


def _words(name: str) -> list[str]:
    return [word.lower() for word in _KEY_BREAK.split(name[-_LONGEST_KEY:]) if word]


_TOKENIZER = re.compile(r"(?:de)?tokeni[sz](?:e[rd]?s?|ing|ation)")  # a word, exactly


def _data_shape(name: str) -> bool:
    """Whether *name* is shaped as data (:func:`is_data_name`'s rule, credentials aside)."""
    words = _words(name)
    rest = [word for word in words if not _TOKENIZER.fullmatch(word)]
    if len(rest) < len(words):  # tokenizer, tokenizer_path
        # but not tokenizer_auth_header (the default words: this verdict is cached)
        return not _secret_name("_".join(rest), _DEFAULT_NAME)
    if len(words) < 2:
        return False
    last = words[-1]
    return last in _DATA_LAST or words[-2] in _PLURALS.get(last, ()) or _special_token(words)
