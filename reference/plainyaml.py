"""The YAML job files are written in, read without PyYAML: block mappings and sequences, flow
collections on one line, plain and quoted scalars, comments. `UNREAD` for anything else.

PyYAML's import is most of a fast command's own start (20 ms of 34 on this project's hosts: its
reader compiles a large regex at import), and `job run FILE` pays it on every run. This reader
takes the common shape of a job file and gives exactly what PyYAML's safe loader gives for it,
types included (YAML 1.1's `yes` is True, `010` is not 10); for any text it is not sure of
(tabs, non-ASCII, anchors, tags, block scalars, multi-line scalars, escapes, documents,
complex keys, flow collections across lines, numbers in any form but the plainest, errors) it
gives `UNREAD`, and the caller reads the text with PyYAML, which also words every error. A
differential test (tests/unit/test_plainyaml.py) holds it to PyYAML's answer on generated texts.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the fast path's start
    from typing import Any


class Unread(Exception):
    """The text is outside what this reader is sure of."""


UNREAD: Any = object()

_BOOLS = {
    **dict.fromkeys(("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
_NULLS = ("", "~", "null", "Null", "NULL")
_DIGITS = "0123456789"
# A plain scalar cannot start with these (YAML 1.1's indicators); '-', '?' and ':' only when a space follows.
_INDICATORS = "-?:,[]{}#&*!|>'\"%@`"
_NUMERIC_SHAPES: list[Any] = []  # PyYAML's int, float and timestamp patterns, compiled when first needed
# Every character those patterns can match: a text with another is no number to PyYAML.
_NUMERIC_CHARACTERS = frozenset("0123456789_+-.: \t" "xabcdefABCDEF" "infINFNaA" "TtZ")
# PyYAML refuses a simple key longer than 1024 characters; well below that, this reader reads it.
_MAX_KEY = 1000


def parse(text: str) -> Any:
    """The document in `text` as PyYAML's safe loader reads it, or UNREAD."""
    if not text.isascii() or any(c < " " and c != "\n" or c == "\x7f" for c in text):
        return UNREAD  # tabs, CR, control characters, non-ASCII: PyYAML's own rules
    lines: list[tuple[int, str]] = []
    for raw in text.split("\n"):
        body = raw.lstrip(" ")
        if not body or body[0] == "#":
            continue
        if raw[:3] in ("---", "...") and raw[3:4] in ("", " "):
            return UNREAD  # document markers
        lines.append((len(raw) - len(body), body.rstrip(" ")))
    if not lines:
        return None
    try:
        value, end = _Block(lines).node(0, lines[0][0])
    except (Unread, RecursionError):
        return UNREAD
    return value if end == len(lines) else UNREAD


class _Block:
    def __init__(self, lines: list[tuple[int, str]]) -> None:
        self.lines = lines

    def indent(self, i: int) -> int:
        return self.lines[i][0] if i < len(self.lines) else -1

    def node(self, i: int, indent: int) -> tuple[Any, int]:
        """The node whose first line is line i, at column `indent`; and the line after it."""
        body = self.lines[i][1]
        if _is_item(body):
            return self.sequence(i, indent)
        if _key(body) is not None:
            return self.mapping(i, indent)
        value = _inline(body)
        if self.indent(i + 1) > indent:
            raise Unread  # a scalar over several lines
        return value, i + 1

    def sequence(self, i: int, indent: int) -> tuple[Any, int]:
        items = []
        while self.indent(i) == indent and _is_item(self.lines[i][1]):
            rest = self.lines[i][1][1:]
            if not rest.strip(" "):
                item, i = self.nested(i + 1, indent)
            else:  # "- x": x is a node at its own column, so "- a: 1" is a mapping that the next lines can go on
                column = indent + 1 + len(rest) - len(rest.lstrip(" "))
                self.lines[i] = (column, rest.lstrip(" "))
                item, i = self.node(i, column)
            items.append(item)
        if self.indent(i) > indent:
            raise Unread
        return items, i

    def mapping(self, i: int, indent: int) -> tuple[Any, int]:
        mapping: dict[Any, Any] = {}
        while self.indent(i) == indent:
            body = self.lines[i][1]
            found = _key(body)
            if found is None or _is_item(body):
                raise Unread  # a line in a mapping that is no entry of it
            key, rest = found
            if rest:
                value = _inline(rest)
                i += 1
                if self.indent(i) > indent:
                    raise Unread  # a scalar over several lines, or a value YAML refuses
            elif self.indent(i + 1) == indent and _is_item(self.lines[i + 1][1]):
                value, i = self.sequence(i + 1, indent)  # a sequence may sit at its key's column
            else:
                value, i = self.nested(i + 1, indent)
            mapping[key] = value
        if self.indent(i) > indent:
            raise Unread
        return mapping, i

    def nested(self, i: int, indent: int) -> tuple[Any, int]:
        """The node on the lines after a bare `key:` or `-`: null when none is deeper."""
        if self.indent(i) > indent:
            return self.node(i, self.indent(i))
        return None, i


def _is_item(body: str) -> bool:
    """Whether the line is a block sequence's entry: `-` alone or before a space."""
    return body == "-" or body.startswith("- ")


def _key(body: str) -> tuple[Any, str] | None:
    """(key, the text after `key:`) when the line is a block mapping's entry; None when it is not
    one; Unread when it may be one this reader does not take."""
    if body[0] in "[{":
        return None  # a flow collection; as a key, _inline refuses what follows it
    if body[0] in "'\"":
        key, end = _quoted(body, 0)
        if end > _MAX_KEY:
            raise Unread
        if body[end : end + 1] != ":":
            if body[end:].lstrip(" ")[:1] in ("", "#"):
                return None
            raise Unread
        rest = body[end + 1 :]
        if rest and rest[0] != " ":
            raise Unread
        return key, _uncomment(rest)
    at = body.find(": ")
    if at < 0 and body.endswith(":"):
        at = len(body) - 1
    if at < 0:
        return None
    text = body[:at].rstrip(" ")
    if not text or " #" in body[: at + 1] or body[0] == "?" or at > _MAX_KEY:
        raise Unread
    return _plain(text), _uncomment(body[at + 1 :])


def _uncomment(rest: str) -> str:
    """The value text after a key: its comment and spaces cut."""
    rest = rest.strip(" ")
    if rest.startswith("#"):
        return ""
    at = rest.find(" #")
    if at >= 0 and rest[0] not in "'\"[{":
        rest = rest[:at].rstrip(" ")
    return rest


def _inline(text: str) -> Any:
    """A value on one line in block context: a flow collection, a quoted or a plain scalar."""
    if text[0] in "[{'\"":
        value, end = _flow(text, 0) if text[0] in "[{" else _quoted(text, 0)
        tail = text[end:]
        if tail.strip(" ") and not (tail[0] == " " and tail.lstrip(" ")[0] == "#"):
            raise Unread
        return value
    at = text.find(" #")
    if at >= 0:
        text = text[:at].rstrip(" ")
    if ": " in text or text.endswith(":"):
        raise Unread  # YAML refuses a mapping here
    return _plain(text)


def _plain(text: str) -> Any:
    """A plain scalar resolved as PyYAML's resolver does, for the forms this reader takes."""
    if not text:
        return None
    first = text[0]
    if first in _INDICATORS and (first not in "-?:" or text[1:2] in ("", " ")):
        raise Unread
    if text in _NULLS:
        return None
    if text in _BOOLS:
        return _BOOLS[text]
    if first in "-+.<=" or first in _DIGITS:
        body = text[1:] if first in "-+" else text
        whole, dot, fraction = body.partition(".")
        if whole.isdigit() and (whole == "0" or whole[0] != "0") and not dot:
            return int(text)
        if whole.isdigit() and dot and fraction.isdigit():
            return float(text)
        if text in ("<<", "="):
            raise Unread  # merge keys, and the value tag PyYAML cannot construct
        if not set(text) <= _NUMERIC_CHARACTERS:
            return text  # 100m, 64MiB: no number, of any form
        if not _NUMERIC_SHAPES:
            import re

            _NUMERIC_SHAPES.extend(re.compile(p) for p in _PYYAML_NUMERIC)
        if any(shape.match(text) for shape in _NUMERIC_SHAPES):
            raise Unread  # 0x1f, 1_000, 010, 1:30, .inf, 2024-01-01, ...: PyYAML's many forms
    return text


def _quoted(text: str, start: int) -> tuple[str, int]:
    """A quoted scalar that starts at `start` and ends on this line, and the position after it."""
    quote = text[start]
    if quote == "'":
        parts, at = [], start + 1
        while True:
            end = text.find("'", at)
            if end < 0:
                raise Unread
            parts.append(text[at:end])
            if text[end + 1 : end + 2] != "'":
                return "'".join(parts), end + 1
            at = end + 2
    end = text.find('"', start + 1)
    if end < 0 or "\\" in text[start:end]:
        raise Unread  # over lines, or escapes
    return text[start + 1 : end], end + 1


def _flow(text: str, at: int) -> tuple[Any, int]:
    """A flow sequence or mapping that starts at `at` and closes on this line, and the position after it."""
    close = "]" if text[at] == "[" else "}"
    collection: Any = [] if close == "]" else {}
    at = _skip(text, at + 1)
    if text[at : at + 1] == close:
        return collection, at + 1
    while True:
        if close == "]":
            item, at = _flow_value(text, at, key=False)
            collection.append(item)
        else:
            key, at = _flow_value(text, at, key=True)
            if text[at : at + 2] != ": ":
                raise Unread
            value, at = _flow_value(text, _skip(text, at + 2), key=False)
            collection[key] = value
        at = _skip(text, at)
        sign = text[at : at + 1]
        if sign == close:
            return collection, at + 1
        if sign != ",":
            raise Unread
        at = _skip(text, at + 1)
        if text[at : at + 1] in ("", ",", close):
            raise Unread  # a trailing or an empty entry


def _flow_value(text: str, at: int, key: bool) -> tuple[Any, int]:
    if at >= len(text):
        raise Unread  # over lines
    if text[at] in "[{":
        if key:
            raise Unread
        return _flow(text, at)
    if text[at] in "'\"":
        value, end = _quoted(text, at)
        if key and end - at > _MAX_KEY:
            raise Unread
        end = _skip(text, end)
        if text[end : end + 1] not in ((":",) if key else (",", "]", "}")):
            raise Unread
        return value, end
    end = at
    while end < len(text) and text[end] not in ",]}:":
        end += 1
    plain = text[at:end].rstrip(" ")
    if not plain or any(c in plain for c in "#?[{") or key and end - at > _MAX_KEY:
        raise Unread
    return _plain(plain), end


def _skip(text: str, at: int) -> int:
    while text[at : at + 1] == " ":
        at += 1
    return at


# PyYAML's resolver (yaml/resolver.py): the forms of int, float and timestamp it knows. A plain
# scalar of any of these shapes that is not a plain decimal is left to PyYAML.
_PYYAML_NUMERIC = (
    r"""(?x)^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    r"""(?x)^(?:[-+]?0b[0-1_]+
    |[-+]?0[0-7_]+
    |[-+]?(?:0|[1-9][0-9_]*)
    |[-+]?0x[0-9a-fA-F_]+
    |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$""",
    r"""(?x)^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]
    |[0-9][0-9][0-9][0-9] -[0-9][0-9]? -[0-9][0-9]?
    (?:[Tt]|[ \t]+)[0-9][0-9]?
    :[0-9][0-9] :[0-9][0-9] (?:\.[0-9]*)?
    (?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$""",
)
