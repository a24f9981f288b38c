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


def live_in_group(pgid: int) -> list[str]:
    """Live (not zombie) processes of process group ``pgid``, as ``pid name``. A zombie is no process left running:
    one whose parent died is the init process's to reap, and a container's init may never reap it (here a cmake
    zombie of the route gate's pytest stayed, parent 1, and ``killpg(pgid, 0)`` still found the group)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(f"{entry.name} {stat[stat.find('(') + 1 : stat.rfind(')')]}")
    return found
