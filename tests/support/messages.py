"""Messages the tests match on are the code's own constants (``str.format`` templates next to the code that says
them); a test fills in what it knows and :func:`said` matches the rest, so a reworded message is one edit."""

from __future__ import annotations

import re
import string


def pattern(template: str, **known: object) -> re.Pattern[str]:
    """``template`` as a regular expression: its text literally, each field in ``known`` as its formatted value, and
    any other field as any text within one line."""
    parts: list[str] = []
    for literal, name, spec, conversion in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if name is None:
            continue
        if name in known:
            value = known[name]
            value = repr(value) if conversion == "r" else str(value) if conversion == "s" else value
            parts.append(re.escape(format(value, spec or "")))
        else:
            parts.append(r"[^\n]*?")
    return re.compile("".join(parts))


def said(template: str, text: str, **known: object) -> bool:
    """Whether ``text`` holds the message ``template``, with the fields in ``known`` filled in."""
    return pattern(template, **known).search(text) is not None


class _Open(dict[str, object]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def partly(template: str, **known: object) -> str:
    """``template`` with the fields in ``known`` filled in and the others left as fields: a value that is itself a
    template (a message built of messages, or one whose end the test does not know) keeps its own fields for
    :func:`said` and :func:`pattern`."""
    return template.format_map(_Open(known))
