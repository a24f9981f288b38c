"""JSON read strictly, for every JSON file the launcher and the orchestration read: a key given twice in one
object is an error (the json module keeps the last one silently)."""

from __future__ import annotations

import json
from typing import Any


class DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(f'the key "{key}" is given twice in one object')
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for ``json.loads``: raises DuplicateKey."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def loads(text: str | bytes) -> Any:
    """``json.loads`` refusing a key given twice (DuplicateKey, a ValueError)."""
    return json.loads(text, object_pairs_hook=unique_keys)
