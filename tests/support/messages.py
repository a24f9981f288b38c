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
            parts.append(re.escape(_formatted(known[name], spec, conversion)))
        else:
            parts.append(r"[^\n]*?")
    return re.compile("".join(parts))


def said(template: str, text: str, **known: object) -> bool:
    """Whether ``text`` holds the message ``template``, with the fields in ``known`` filled in."""
    return pattern(template, **known).search(text) is not None


def partly(template: str, **known: object) -> str:
    """``template`` with the fields in ``known`` filled in and the others left as fields, their format specs kept: a
    value that is itself a template (a message built of messages, or one whose end the test does not know, such as
    ``"1.0{median}"``) goes in as it is and keeps its own fields for :func:`said` and :func:`pattern`."""
    out: list[str] = []
    for literal, name, spec, conversion in string.Formatter().parse(template):
        out.append(_escaped(literal))
        if name is None:
            continue
        value = known.get(name, _MISSING)
        if value is _MISSING:
            out.append("{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}")
        elif isinstance(value, str) and _has_fields(value):
            out.append(value)
        else:
            out.append(_escaped(_formatted(value, spec, conversion)))
    return "".join(out)


_MISSING = object()


def _formatted(value: object, spec: str | None, conversion: str | None) -> str:
    value = repr(value) if conversion == "r" else str(value) if conversion == "s" else value
    return format(value, spec or "")


def _escaped(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _has_fields(text: str) -> bool:
    try:
        return any(name is not None for _, name, _, _ in string.Formatter().parse(text))
    except ValueError:  # a lone brace: text, not a template
        return False
