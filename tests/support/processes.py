"""Leak checks: which processes are still alive."""

from __future__ import annotations

import os
from pathlib import Path


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
