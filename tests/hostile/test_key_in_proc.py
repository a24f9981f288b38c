"""The ledger's key is not read from the orchestration's /proc/PID/environ (issue 36; a hostile pass, 2026-12-05).

The allow-list keeps ONEBIT_LEDGER_KEY out of every program a gate or a build starts, but the key stayed in the
initial environment of the process that started it (``python -m ci``, nox above it): any process of the same user
reads ``/proc/<ppid>/environ`` (a fork's cmake walking up its parents read it, and signed a pass after a failure).
A process that is not dumpable (``prctl(PR_SET_DUMPABLE, 0)``) has its /proc files owned by root: the same user's
other processes can read neither its environment nor its memory. ci makes itself so before it starts any program,
whenever the key or the witness is in its environment (nox's process does the same in noxfile.py); a program it
starts is dumpable again (execve), and holds no key.

Measured here, as an unprivileged user (``setpriv --reuid=65534``): a child read its parent's environ and found the
key; with the parent not dumpable the read failed with EACCES. This test checks ci's part: the flag."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PR_GET_DUMPABLE = 3
STARTS_A_PROGRAM = """
import ctypes, sys
from ci.command import run
run(["true"])
print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))
"""


def dumpable_after_a_start(env: dict[str, str]) -> int:
    done = subprocess.run([sys.executable, "-c", STARTS_A_PROGRAM], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
@pytest.mark.parametrize("secret", ["ONEBIT_LEDGER_KEY", "ONEBIT_LEDGER_WITNESS"])
def test_with_the_key_or_witness_set_ci_is_not_dumpable_once_it_starts_a_program(secret: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ONEBIT_LEDGER_KEY", "ONEBIT_LEDGER_WITNESS")}
    assert dumpable_after_a_start(env) == 1  # nothing to hide: core dumps and debuggers as usual
    assert dumpable_after_a_start({**env, secret: "runner secret"}) == 0


def test_nox_installs_the_project_without_the_key() -> None:
    """pip and the builds it runs are dumpable for seconds: a second hostile pass found nox handing them the key."""
    noxfile = (ROOT / "noxfile.py").read_text()
    assert 'NO_KEY = {"ONEBIT_LEDGER_KEY": "", "ONEBIT_LEDGER_WITNESS": ""}' in noxfile
    installs = [line for line in noxfile.splitlines() if '"pip", "install"' in line or "session.install(" in line]
    assert installs, "noxfile.py installs the project"
    assert all("**NO_KEY" in line for line in installs), installs
