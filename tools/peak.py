"""Run a command and say what it took of the machine at its peak: the memory its process tree held, the system's
memory in use above where it started, the most compilers running at once, and the load (docs/ci.md: the first
``nox -s tests`` on a fresh clone).

    python tools/peak.py [--every S] [--json OUT] -- COMMAND [ARG...]

Samples every S seconds (default 0.5); the command's exit status is this script's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

COMPILERS = frozenset(("cc1", "cc1plus", "clang", "clang++", "nvcc", "cicc", "ptxas", "hipcc", "glslc"))
GIB = 2**30


def tree_sample(root: psutil.Process) -> tuple[int, int]:
    """(resident bytes of the tree, compilers in it) now."""
    rss = 0
    compilers = 0
    try:
        members = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    for p in members:
        try:
            rss += p.memory_info().rss
            compilers += p.name() in COMPILERS
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return rss, compilers


def main() -> int:
    p = argparse.ArgumentParser(prog="peak.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("--every", type=float, default=0.5, metavar="S")
    p.add_argument("--json", metavar="OUT", help="also write the figures here")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command after --")
    used0 = psutil.virtual_memory().total - psutil.virtual_memory().available
    started = time.monotonic()
    child = subprocess.Popen(command, start_new_session=True)
    root = psutil.Process(child.pid)
    peak = {"tree_rss_gib": 0.0, "system_used_above_start_gib": 0.0, "compilers_at_once": 0, "load_1min": 0.0}
    try:
        while child.poll() is None:
            rss, compilers = tree_sample(root)
            mem = psutil.virtual_memory()
            peak["tree_rss_gib"] = max(peak["tree_rss_gib"], rss / GIB)
            peak["system_used_above_start_gib"] = max(peak["system_used_above_start_gib"], (mem.total - mem.available - used0) / GIB)
            peak["compilers_at_once"] = max(peak["compilers_at_once"], compilers)
            peak["load_1min"] = max(peak["load_1min"], os.getloadavg()[0])
            time.sleep(args.every)
    except KeyboardInterrupt:
        os.killpg(child.pid, signal.SIGINT)
        child.wait()
        raise
    figures = {**{k: round(v, 2) for k, v in peak.items()}, "seconds": round(time.monotonic() - started, 1), "exit": child.returncode, "command": command}
    line = (
        f"peak: tree {figures['tree_rss_gib']} GiB resident, system +{figures['system_used_above_start_gib']} GiB, "
        f"{figures['compilers_at_once']} compilers at once, load {figures['load_1min']}; {figures['seconds']} s, exit {child.returncode}"
    )
    print(line, file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
