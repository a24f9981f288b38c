from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ci import command
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
    assert exc.value.message.endswith("exited with status 3")


def test_a_missing_program_is_one_line() -> None:
    with pytest.raises(ToolchainError, match="no-such-program-here: not found on PATH"):
        command.run(["no-such-program-here"])


def test_a_timeout_kills_and_says_so() -> None:
    done = command.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5, check=False, quiet=True)
    assert done.timed_out
    assert done.returncode < 0
