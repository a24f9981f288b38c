from __future__ import annotations

import re
import sys
from pathlib import Path

import psutil
import pytest

from ci import command, errors
from ci.errors import CommandFailed, ToolchainError


def test_a_symlinked_interpreter_keeps_its_path(tmp_path: Path) -> None:
    """A venv's python is a symlink to the base interpreter: resolving it would lose the venv's packages."""
    link = tmp_path / "bin" / "python3"
    link.parent.mkdir()
    link.symlink_to(sys.executable)
    done = command.run([str(link), "-c", "import sys; print(sys.argv[0] or sys.executable)"], quiet=True)
    assert done.argv[0] == str(link)


def test_a_failure_carries_argv_status_and_tail() -> None:
    with pytest.raises(CommandFailed) as exc:
        command.run([sys.executable, "-c", "print('last words'); raise SystemExit(3)"], quiet=True)
    assert exc.value.returncode == 3
    assert "last words" in exc.value.tail
    assert exc.value.message == errors.EXITED.format(program=sys.executable, status=errors.STATUS.format(code=3))


def test_a_missing_program_is_one_line() -> None:
    with pytest.raises(ToolchainError, match=re.escape(command.NOT_ON_PATH.format(program="no-such-program-here"))):
        command.run(["no-such-program-here"])


def test_a_timeout_kills_and_says_so() -> None:
    done = command.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5, check=False, quiet=True)
    assert done.timed_out
    assert done.returncode < 0


def test_a_timeout_ends_the_whole_tree(tmp_path: Path) -> None:
    hang = tmp_path / "hang.sh"
    hang.write_text("#!/bin/sh\nsleep 300 &\nsleep 301\n")  # a background child and a foreground one
    hang.chmod(0o755)
    before = {p.pid for p in psutil.process_iter() if p.name() == "sleep"}
    done = command.run([str(hang)], timeout=1.0, check=False, quiet=True)
    assert done.timed_out
    left = [p for p in psutil.process_iter(["name", "ppid"]) if p.info["name"] == "sleep" and p.pid not in before]
    assert left == [], "a sleep of the tree outlived the timeout"


def test_a_log_that_cannot_be_written_ends_the_program_and_names_the_log() -> None:
    """/dev/full answers every write with ENOSPC, as a full disk does; the program prints 2 MB, more than a pipe holds."""
    program = "import sys\nfor i in range(40000): print('x' * 50, flush=True)\nimport time; time.sleep(60)"
    with open("/dev/full", "w") as log, pytest.raises(OSError, match="No space left on device") as exc:
        command.run([sys.executable, "-c", program], log_file=log, quiet=True, timeout=60)
    assert exc.value.strerror == "No space left on device"
    assert exc.value.filename == "/dev/full"
