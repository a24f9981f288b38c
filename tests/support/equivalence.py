"""Recorded answers of the real CPU llama-server, replayed by the judge's unit tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from ci.gates.equivalence.judge import Completion, parse_completion
from ci.gates.serving.prompts import Prompt

DATA = Path(__file__).resolve().parents[1] / "gates" / "equivalence" / "data"


class Recorded:
    """The real answers of tests/gates/equivalence/data/streams.json (see record_streams.py for how they were made)."""

    def __init__(self) -> None:
        raw = json.loads((DATA / "streams.json").read_text())
        self.prompt = Prompt("short", raw["prompt"])
        self.tokens: int = raw["tokens"]
        self._answers: dict[str, dict[str, Any]] = raw["answers"]

    def raw(self, key: str) -> dict[str, Any]:
        return copy.deepcopy(self._answers[key])  # a copy a test may edit

    def answer(self, key: str) -> Completion:
        return parse_completion(self.raw(key), key)

