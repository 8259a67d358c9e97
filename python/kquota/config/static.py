"""Static quota defaults from a Java-style properties file, for services with no store.

The file holds at most these four keys (KIP-13's broker settings)::

    # bytes/s for each client id that has no quota of its own (entity: <default> client-id)
    quota.producer.default=1048576
    quota.consumer.default=2097152
    # optional: the sampled window (Kafka's defaults: 11 samples of 1 s)
    quota.window.num=11
    quota.window.size.seconds=1

``quota.producer.default`` becomes ``producer_byte_rate`` and ``quota.consumer.default``
``consumer_byte_rate`` of the entity ``<default>`` client-id, the meaning these settings
had in Kafka before KAFKA-12591 replaced them with dynamic ``<default>`` overrides. The
result is a :class:`~kquota.config.model.QuotaConfig`: build managers with
:meth:`~kquota.config.model.QuotaConfig.manager`, or give it to
:class:`~kquota.config.live.LiveQuotas` as ``defaults`` under a dynamic store.

The syntax is ``java.util.Properties``: ``#`` and ``!`` comments, ``key=value``,
``key: value`` or ``key value``, a trailing backslash continues a line, and ``\\t``,
``\\uXXXX`` style escapes. Stricter than Java: an unknown key, a key given twice or a bad
value is a :class:`~kquota.exceptions.QuotaFileError` naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from kquota import DEFAULT, Entity
from kquota.config.model import QuotaConfig, QuotaEntry, Window, parse_value
from kquota.exceptions import QuotaFileError

DEFAULT_PROPERTIES: Final[dict[str, str]] = {
    "quota.producer.default": "producer_byte_rate",
    "quota.consumer.default": "consumer_byte_rate",
}
"""Each static default and the property it sets on the ``<default>`` client-id."""

WINDOW_PROPERTIES: Final = ("quota.window.num", "quota.window.size.seconds")
"""The window settings a static-defaults file may also hold."""

_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WHOLE_NUMBER: Final = re.compile(r"[0-9]+")


def load_static_defaults(path: str | Path) -> QuotaConfig:
    """Read a static-defaults properties file (see the module documentation)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise QuotaFileError(f"cannot read properties file {str(path)!r}: {reason}") from None
    return parse_static_defaults(text, str(path))


def parse_static_defaults(text: str, source: str = "properties") -> QuotaConfig:
    """Parse the text of a static-defaults file; errors read ``SOURCE:LINE: ...``."""
    seen: dict[str, int] = {}
    config: dict[str, float] = {}
    window = {"quota.window.num": 11, "quota.window.size.seconds": 1}
    for line_no, key, value in _properties(text, source):
        where = f"{source}:{line_no}"
        if key in seen:
            raise QuotaFileError(f"{where}: {key} is already set on line {seen[key]}")
        seen[key] = line_no
        if key in DEFAULT_PROPERTIES:
            try:  # checked as the property it becomes (Kafka declared both LONGs too)
                config[DEFAULT_PROPERTIES[key]] = parse_value(DEFAULT_PROPERTIES[key], value)
            except QuotaFileError as exc:
                raise QuotaFileError(f"{where}: {key}: {exc}") from None
        elif key in WINDOW_PROPERTIES:
            value = value.strip()
            if _WHOLE_NUMBER.fullmatch(value) is None or int(value) < 1:
                raise QuotaFileError(
                    f"{where}: invalid value {value!r} for {key}: expected a whole number >= 1"
                )
            window[key] = int(value)
        else:
            known = ", ".join([*DEFAULT_PROPERTIES, *WINDOW_PROPERTIES])
            raise QuotaFileError(f"{where}: unknown key {key!r}: expected one of {known}")
    entries = (QuotaEntry(Entity(client_id=DEFAULT), config),) if config else ()
    return QuotaConfig(
        Window(window["quota.window.num"], window["quota.window.size.seconds"] * 1000), entries
    )


def _properties(text: str, source: str) -> Iterator[tuple[int, str, str]]:
    """``(first line number, key, value)`` for each logical line of a properties file."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        first = i + 1
        logical = lines[i].lstrip(" \t\f")
        i += 1
        if not logical or logical[0] in "#!":
            continue
        while _continues(logical):
            logical = logical[:-1]
            if i == len(lines):
                break
            logical += lines[i].lstrip(" \t\f")
            i += 1
        key, value = _split(logical)
        try:
            yield first, _unescape(key), _unescape(value)
        except ValueError as exc:
            raise QuotaFileError(f"{source}:{first}: {exc}") from None


def _continues(line: str) -> bool:
    """Whether ``line`` ends with an odd number of backslashes."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split(line: str) -> tuple[str, str]:
    """Key and raw value: the key ends at the first unescaped ``=``, ``:`` or blank."""
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in "=: \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        escaped = text[i + 1]
        if escaped == "u":
            digits = text[i + 2 : i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ValueError(f"malformed \\uXXXX escape {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(escaped, escaped))
            i += 2
    return "".join(out)
