"""Temporary folders are swept (issue 43, item 6). SIGKILL of ``python -m ci`` left its ``/tmp/onebit-bytecode-*``
folder (a kill runs no clean-up), one per killed run. Each folder this tool makes in the temporary folder is named
after its process now, and a command's start removes those whose process is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ci import scratch

ROOT = Path(__file__).resolve().parents[2]
STARTED = "import sys, time\nfrom ci.cli import fresh_imports\nwith fresh_imports():\n    print(sys.pycache_prefix, flush=True)\n    time.sleep(60)\n"


def test_a_killed_ci_leaves_its_bytecode_folder_to_the_next_command_which_removes_it(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    child = subprocess.Popen([sys.executable, "-c", STARTED], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    folder = Path(child.stdout.readline().strip())
    assert folder.parent == tmp_path
    assert folder.name.startswith(f"onebit-bytecode-{child.pid}-")
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert folder.is_dir()  # a kill runs no clean-up
    mine = tmp_path / f"onebit-cwd-{os.getpid()}-x"
    mine.mkdir()  # a live process's folder
    done = subprocess.run([sys.executable, "-m", "ci", "matrix", "--profiles", "cpu"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not folder.exists()
    assert mine.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [mine.name]  # and the command's own went with it


def test_the_sweep_leaves_what_is_not_its_own(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"onebit-bytecode-{dead.pid}-abc").mkdir()
    (tmp_path / f"onebit-serve-{dead.pid}-abc").mkdir()  # the launcher's private copies are its own to remove
    (tmp_path / f"onebit-bytecode-{dead.pid}-file").write_text("")  # not a folder
    (tmp_path / "unrelated").mkdir()
    time.sleep(0.01)
    assert [p.name for p in scratch.sweep(tmp_path)] == [f"onebit-bytecode-{dead.pid}-abc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"onebit-serve-{dead.pid}-abc", f"onebit-bytecode-{dead.pid}-file", "unrelated"])
