from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ci.equivalence import Completion, Prompt, parse_completion

DATA = Path(__file__).parent / "data"


class Recorded:
    """The real answers of tests/equivalence/data/streams.json (see record_streams.py for how they were made)."""

    def __init__(self) -> None:
        raw = json.loads((DATA / "streams.json").read_text())
        self.prompt = Prompt("short", raw["prompt"])
        self.tokens: int = raw["tokens"]
        self._answers: dict[str, dict[str, Any]] = raw["answers"]

    def raw(self, key: str) -> dict[str, Any]:
        return copy.deepcopy(self._answers[key])  # a copy a test may edit

    def answer(self, key: str) -> Completion:
        return parse_completion(self.raw(key), key)


@pytest.fixture(scope="session")
def recorded() -> Recorded:
    return Recorded()


def live_processes_naming(text: str) -> list[str]:
    """Command lines of live (not zombie) processes that contain ``text``: a leak check that needs no pid."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if text in cmdline and stat[stat.rfind(")") + 2] != "Z":
            found.append(f"{entry.name}: {cmdline}")
    return found
