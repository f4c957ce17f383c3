"""Secret values beside their names in text: pairs, header lines, reprs and flags.

``token=abc``, ``'Authorization': 'Basic abc'``, ``Cookie: a=b``,
``(b'x-api-key', b'abc')``, ``--password abc``: the name stays, its whole
value (through its closing quote or bracket, or to the end of its line)
becomes ``REDACTED``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from . import _secret_words
from ._credential_names import _credential_header, is_credential_key, is_data_name
from ._redact_urls import _LINE_END
from ._secret_words import REDACTED, SECRET_WORDS, _flag, _registered_header, _secret_name

# A name (starting where no name character precedes it) and its separator; the
# value is matched apart, so a name that is not secret-like consumes nothing more.
# "user[password]=" counts: a "]" may close the name. A name's quote may be escaped
# (JSON inside a JSON string: \"password\": \"abc\"); "==" counts only glued to both
# sides (HTTPie's "access_token==abc"; not "tokens == expected").
# The name is taken whole, never backtracked into (a lookahead's group, then the same
# text: an atomic group that 3.10 can compile): a separator never starts with a name's
# character, so a shorter name could never match, and trying each costs a third of the
# scan of ordinary prose.
_NAME_SEP = re.compile(
    r"(?<![\w.\-%\[])(?=(?P<name>[\w.\-%\[]{1,128}))(?P=name)\]?"
    r"(?P<sep>[ \t]*=(?!=)[ \t]*|==(?=[^\s=])|\\?(?P<quote>['\"])[ \t]*:[ \t]*|[ \t]*:[ \t]*)"
)
# A value quoted with escaped quotes (\"abc\", JSON inside a JSON string), through its
# closing escaped quote: an escaped backslash (\\) and an escaped quote (\\\") inside it
# are characters of it.
_ESCAPED_QUOTED = (
    r"\\'(?:[^\\\n]|\\\\\\'|\\\\|\\[^'\\\n])*(?:\\')?|"
    r"\\\"(?:[^\\\n]|\\\\\\\"|\\\\|\\[^\"\\\n])*(?:\\\")?|"
)
# A value: quoted (a bytes repr's b'...' too; backslash escapes kept inside; an
# unterminated one to the end of its line), or unquoted up to white space, a quote
# that ends it, an escaped line break that ends a line (\r\n, or \n before what starts
# a credential's line, _NEXT_LINE: "\nAuthorization: ...", "\nBearer ...", "\n--password
# ..."; not "CORP\nancy", nor an escaped backslash's "\\n"), or an "&" or ";" that
# starts the next "name=" (so "Tr0ub4dor&3xyz" goes whole, and "token=abc&n=1" keeps
# its "n=1"); an unquoted one's trailing ")", ",", "]" and "}" are left out of it
# (_value_end): "(token=abc)", "{'key': 1, ...}".
# A quote ends it before a blank, a closer or the end ("Tr0ub'#4dor" goes whole);
# in a quoted pair ('token=abc'.split(...): a quote right before the name), before
# anything but a letter or digit.
_QUOTE_ENDS = r"['\"](?![\s,)\]}]|\Z)"
_QUOTE_ENDS_QUOTED = r"['\"](?=\w)"


_SCHEMES = "basic|bearer|digest|token|negotiate"  # an Authorization value's scheme words
# What starts the next line after an escaped "\n" (the "n" read): a "Name: " (dotted,
# Go's "map[Name:[", quoted), a "name=", a scheme word, a flag or a password tool.
_NEXT_LINE = (
    r"(?:[\w.\-\[]{1,128}:[ \t\[]|[\w.\-]{1,128}=|\\?['\"][\w.\-]{1,128}\\?['\"][ \t]*:"
    rf"|(?:{_SCHEMES})[ \t]|-|mysql|mariadb|sshpass|docker)"
)


def _value(quote: str) -> re.Pattern[str]:
    return re.compile(
        _ESCAPED_QUOTED + r"b?'(?:[^'\\\n]|\\.)*'?|b?\"(?:[^\"\\\n]|\\.)*\"?|"
        rf"(?:(?:{_SCHEMES})[ \t]+)*"
        rf"(?:[^\s'\"&;\\]|\\\\|\\(?!r\\n|n{_NEXT_LINE})|{quote}|[&;](?![\w.\-%\[\]]{{1,128}}=))+",
        re.IGNORECASE,
    )


# A credential header's value: quoted (b'...' too), through its closing quote or to
# the end of its line; or the rest of its line up to a quote that ends it (as above,
# an escaped one too), an angle bracket, or an escaped line break that ends a header
# line (\r\n, or \n before the next "Name: ", in a repr or JSON; not "CORP\nancy"),
# with a quoted string after an "=" inside it (Cookie: sid="abc", Digest
# response="...") taken whole.
def _header_value(quote: str) -> re.Pattern[str]:
    return re.compile(
        _ESCAPED_QUOTED + r"b?'(?:[^'\\\r\n]|\\.)*'?|b?\"(?:[^\"\\\r\n]|\\.)*\"?|"
        rf"(?:[^\r\n'\"<>=\\]|{quote}|\\['\"](?=\w)|\\(?!r\\n|n[\w\-]{{1,128}}:\s|['\"])[^\r\n]"
        r"|=(?:\\'[^'\\\r\n]*\\'|\\\"[^\"\\\r\n]*\\\"|'(?:[^'\\\r\n]|\\.)*'?|\"(?:[^\"\\\r\n]|\\.)*\"?)?)+"
    )


_VALUE = _value(_QUOTE_ENDS)
_QUOTED_PAIR_VALUE = _value(_QUOTE_ENDS_QUOTED)
_HEADER_VALUE = _header_value(_QUOTE_ENDS)
_QUOTED_HEADER_VALUE = _header_value(_QUOTE_ENDS_QUOTED)
_HEADER_VALUES: Final = (_HEADER_VALUE, _QUOTED_HEADER_VALUE)
# What a bracketed value ("auth=('bob', 'pw')", "credentials={...}") is scanned by:
# quoted strings whole (a bracket inside one does not count), brackets, line ends.
_BRACKET_TOKEN = re.compile(r"'(?:[^'\\\n]|\\.)*'?|\"(?:[^\"\\\n]|\\.)*\"?|[()\[\]{}\r\n]")
_CLOSERS: Final = {"(": ")", "[": "]", "{": "}"}
_MAX_BRACKETS = 64  # nested deeper: the value runs to the end of its line
# A header as a (name, value) pair repr: ('x-api-key', 'abc'), (b'cookie', b'a=b').
_PAIR_REPR = re.compile(
    r"\(\s*b?(?P<q1>['\"])(?P<name>[\w.\-]{1,128})(?P=q1)\s*,\s*"
    r"(?P<pre>b?(?P<q2>['\"]))(?:[^'\"\\\n]|\\.)*(?P=q2)"
)
# A port after a URL's host: digits, then the path, query, fragment or the URL's end.
_PORT = re.compile(r"[0-9]{1,5}(?=[/?#\s'\")\]}>,;]|\Z)")
# Their value is secret when it is user:pass (curl's "-u bob:pw", "-ubob:pw").
_USER_FLAGS: Final = frozenset({"-u", "--user", "--proxy-user"})
# What follows a single-dash name in code and math rather than a flag's value: an
# operator, a keyword, another flag.
_OPERAND = re.compile(r"[-+*/%<>=!&|^~@]{1,3}|if|else|and|or|not|in|is|for|-\S*")
_CLOSING: Final = "),]}"  # what ends an unquoted value, trailing it
# The tools whose "-p" takes a password: glued to it for mysql and its kin
# ("-phunter2"), as the next argument for sshpass and docker login ("-p hunter2").
# A tool counts as a command's word: a path before it ("/usr/bin/mysql"), an argv
# list's quote; its "-p" only later on the same line.
_PASSWORD_TOOL = re.compile(
    r"(?:(?<![\w.\-])|(?<=\\[nrt]))(?:(?P<glued>mysql[a-z]{0,8}|mariadb(?:-?[a-z]{1,8})?)"
    r"|(?P<spaced>sshpass|docker(?:['\"][ \t]*,[ \t]*['\"]|[ \t]+)login))(?![\w\-])",
    re.IGNORECASE,
)
# Glued: "-phunter2", and a shell's quotes around it ("-p'hunter2'"; not an argv
# list's "'-p', ..." whose quote closes the flag).
# Its words, as a case-folded text holds them (the quick test before the scan): mariadb
# by "adb", since an ignored case matches the dotless and dotted i as "i" and
# case-folding does not.
_PASSWORD_TOOLS: Final = ("mysql", "adb", "sshpass", "docker")
_GLUED_P = re.compile(r"(?:(?<![\w.\-])|(?<=\\[nrt]))-p(?=[^\s'\"]|['\"][^\s'\",])")
# The next argument, and for sshpass and docker login (getopt, pflag) glued or after "=" too.
_SPACED_P = re.compile(
    r"(?:(?<![\w.\-])|(?<=\\[nrt]))(?:(?P<quote>['\"])-p(?P=quote)[ \t]*,[ \t]*|-p[ \t]+"
    r"|-p=|-p(?=[^\s'\"=]|['\"][^\s'\",]))"
)


# Words a credential name holds that no secret word is part of: header words
# ("X-Session", "Bearer", "Passcode", "sessionid"); and "%", a name read decoded.
_GATE_EXTRA: Final = ("session", "bearer", "passcode", "%")
_Gate = Callable[[str], "re.Match[str] | None"]


def _build_gate(words: frozenset[str]) -> _Gate:
    """What any name the pair and header rules could call a credential holds: a secret
    word, a header word, a registered word (its ``_`` read as ``-`` too: a header
    ``Client-Assertion`` holds ``client_assertion``), or a ``%``. A name holding none is
    passed over at the cost of one search: most names of a text are plain."""
    registered = (re.escape(word).replace("_", "[_\\-]") for word in sorted(words))
    return re.compile("|".join([*SECRET_WORDS, *_GATE_EXTRA, *registered]), re.IGNORECASE).search


_gate: tuple[frozenset[str], _Gate] = (_secret_words._REGISTERED, _build_gate(frozenset()))


def _name_gate() -> _Gate:
    """The gate of the words registered now (rebuilt when they change)."""
    global _gate
    words = _secret_words._REGISTERED
    if _gate[0] is not words:
        _gate = (words, _build_gate(words))
    return _gate[1]


def _redact_pairs(text: str) -> str:
    out: list[str] = []
    pos = 0
    gate = _name_gate()
    for match in _NAME_SEP.finditer(text):
        if match.start() < pos:
            continue  # inside a value already replaced
        name = match.group("name")
        if gate(name) is None:
            continue  # no word a credential's name holds
        # After a backslash, an escaped line break or tab (a repr, JSON: "\nAuth...") or a
        # path's separator (C:\app\token=...): the name is read both ways.
        escaped = name[0] in "nrt" and text[match.start() - 1 : match.start()] == "\\"
        names = (name, name[1:]) if escaped and name[1:] else (name,)
        quoted = text[match.start() - 1 : match.start()] in ("'", '"')  # 'token=abc'.split
        value_pattern: re.Pattern[str] | None = None
        if match.group("quote") or "=" in match.group("sep"):
            # token=..., 'api_key': ..., "password": ...; not max_tokens=... (data)
            if any(_secret_name(one) and not is_data_name(one) for one in names):
                value_pattern = _QUOTED_PAIR_VALUE if quoted else _VALUE
        elif (
            text[max(0, match.start() - 3) : match.start()] == "://"
            and match.group("sep") == ":"
            and _PORT.match(text, match.end()) is not None
        ):
            continue  # a URL's host and port ("http://auth:8080/"): its userinfo is gone
        elif any(_header_name(one.rpartition("[")[2]) for one in names):  # map[Auth:[..]]
            value_pattern = _QUOTED_HEADER_VALUE if quoted else _HEADER_VALUE
        if value_pattern is None:
            continue
        start = match.end()
        if text.startswith(REDACTED, start):  # (by the URL pass): nothing to match, which
            continue  # would run to the line's end for each name on it (quadratic)
        if text[start : start + 1] in _CLOSERS:  # auth=('bob', 'pw'): the whole tuple
            out.append(text[pos:start])
            out.append(REDACTED)
            pos = _bracketed_end(text, start)
            continue
        value = value_pattern.match(text, start)
        if value is None:
            continue
        end = value.end() if value_pattern in _HEADER_VALUES else _value_end(value)
        out.append(text[pos:start])
        out.append(_replacement(text[start:end]))
        pos = end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


_OBJECTS: Final = frozenset(("self", "cls"))


def _header_name(name: str) -> bool:
    """Whether *name*, followed by ``:`` unquoted, names a credential: a credential
    header (``Authorization``, ``X-Api-Key``), a registered word, or a key whose last
    word is a credential (``spring.datasource.password``, ``secretAccessKey``) where
    its last dotted part starts in lower case (not ``KeyError``, ``fernet.InvalidToken``)."""
    if _credential_header(name) or (_registered_header(name) and not is_data_name(name)):
        return True
    first, _, last = name.rpartition(".")
    # not an attribute in a source line ("self.token: str = token")
    return last[:1].islower() and is_credential_key(name) and first not in _OBJECTS


def _value_end(value: re.Match[str]) -> int:
    """Where a :data:`_VALUE` ends: an unquoted one before its trailing ``)``, ``,``,
    ``]`` and ``}`` (all of it if it is nothing else)."""
    found = value.group()
    if found[-1:] not in _CLOSING or found[:1] in ("'", '"') or found[1:2] in ("'", '"'):
        return value.end()
    kept = found.rstrip(_CLOSING)
    return value.start() + len(kept) if kept else value.end()


def _redact_tool_passwords(text: str) -> str:
    """The password after ``-p`` on the command line of a tool that takes one there.

    ``mysql -phunter2`` (mysql, mysqldump, mariadb...: glued to the flag; a bare
    ``-p`` asks for one), ``sshpass -p hunter2`` and ``docker login -p hunter2``
    (the next argument), an argv list's ``'-phunter2'`` and ``'-p', 'hunter2'``
    too: each ``-p`` after the tool's name on its line. Nowhere else is ``-p``
    read as a password: ``grep -pattern``, ``python -p...`` keep theirs. Each
    line is read once: linear.
    """
    out: list[str] = []
    pos = read = 0  # where the text is copied from; where the lines read end
    for tool in _PASSWORD_TOOL.finditer(text):
        if tool.start() < read:
            continue  # on a line read already
        line = _LINE_END.search(text, tool.end())
        line_end = len(text) if line is None else line.start()
        flag = _GLUED_P if tool.group("glued") else _SPACED_P
        for match in flag.finditer(text, tool.end(), line_end):
            start = match.end()
            if start < pos:
                continue
            value = _VALUE.match(text, start, line_end)
            if value is None or value.group().startswith(REDACTED):
                continue
            end = _value_end(value)
            out.append(text[pos:start])
            out.append(_replacement(text[start:end]))
            pos = end
        read = line_end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _redact_flags(text: str) -> str:
    """The value after each secret-like command-line flag replaced.

    ``--password x``, ``--api-key=x``, an argv list's ``'--token', 'x'``, and the
    value of ``-u``/``--user`` when it is ``user:pass`` (curl's form).
    """
    flag_pattern, gate = _flag()
    if gate.search(text) is None:
        return text
    out: list[str] = []
    pos = 0
    for match in flag_pattern.finditer(text):
        if match.start() < pos:
            continue  # inside a value already replaced
        flag = match.group("flag")
        if is_data_name(flag):  # --max-tokens 4096 (before its value: a value left in
            continue  # place would be scanned again by each flag inside it: quadratic)
        user = flag.lower() in _USER_FLAGS
        single = not user and flag[1] != "-"
        if single and not is_credential_key(flag[1:]):  # Go's "-token"; not "-tokens_per_sec"
            continue
        start = match.end()
        value = _VALUE.match(text, start)
        if value is None or value.group().startswith(REDACTED):
            continue
        if user and ":" not in value.group():
            continue
        if single and _OPERAND.fullmatch(value.group()):  # "loss = -logp_token * adv"
            continue
        end = _value_end(value)
        out.append(text[pos:start])
        out.append(_replacement(text[start:end]))
        pos = end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _bracketed_end(text: str, start: int) -> int:
    """Where the value opening with the bracket at *start* ends: after its closing bracket.

    One pass over the brackets and quoted strings that follow (linear); a closer
    of another kind (``(]``) does not close. Unbalanced, or nested deeper than
    _MAX_BRACKETS: the end of its line (on the safe side).
    """
    expected: list[str] = []
    for token in _BRACKET_TOKEN.finditer(text, start):
        char = token.group()[0]
        if char in _CLOSERS:
            if len(expected) == _MAX_BRACKETS:
                break
            expected.append(_CLOSERS[char])
        elif char in "\r\n":
            return token.start()
        elif expected and char == expected[-1]:
            expected.pop()
            if not expected:
                return token.end()
    line_end = _LINE_END.search(text, start)
    return len(text) if line_end is None else line_end.start()


def _replacement(value: str) -> str:
    """``REDACTED`` in *value*'s quotes (``'...'``, ``b"..."``), if it has any."""
    prefix = "b" if value[:1] in ("b", "B") and value[1:2] in ("'", '"') else ""
    if value[:1] == "\\" and value[1:2] in ("'", '"'):  # \"abc\": escaped quotes kept
        return f"{value[:2]}{REDACTED}{value[:2]}"
    quote_ = value[len(prefix) : len(prefix) + 1]
    if quote_ in ("'", '"'):
        return f"{prefix}{quote_}{REDACTED}{quote_}"
    return REDACTED


def _redact_pair_repr(match: re.Match[str]) -> str:
    """``('x-api-key', 'abc')`` -> ``('x-api-key', 'REDACTED')`` for a secret-like name."""
    if not _secret_name(match.group("name")):
        return match.group()
    head = match.group()[: match.start("pre") - match.start()]
    quote_ = match.group("q2")
    return f"{head}{match.group('pre')}{REDACTED}{quote_}"
