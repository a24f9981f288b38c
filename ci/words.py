"""Counts in messages: ``count(1, "commit")`` is "1 commit", ``count(2, "patch")`` is "2 patches"."""

from __future__ import annotations

_IRREGULAR = {"patch": "patches"}


def count(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else _IRREGULAR.get(word, word + 's')}"
