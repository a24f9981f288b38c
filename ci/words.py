"""Counts in messages: ``count(1, "commit")`` is "1 commit", ``count(2, "patch")`` is "2 patches"; ``listed(items, 5)``
is the first five joined, then " and N more"."""

from __future__ import annotations

from collections.abc import Sequence

# Messages, shared with the tests that match on them (tests/support/messages.py)
AND_MORE = " and {count} more"

_IRREGULAR = {"patch": "patches"}


def count(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else _IRREGULAR.get(word, word + 's')}"


def listed(items: Sequence[str], shown: int) -> str:
    """The first ``shown`` of ``items`` joined by ", ", then :data:`AND_MORE` when there are more."""
    more = AND_MORE.format(count=len(items) - shown) if len(items) > shown else ""
    return ", ".join(items[:shown]) + more
