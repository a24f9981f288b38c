"""No write through a link under build/ (issue 43, item 6). The crash log, test-backend-ops' ``.log`` and ``.sql``
files and llama-server's logs followed a planted link and wrote outside the checkout (the gate's JSON and JUnit files
refused links already). Each is now written to a fresh file at its name: a link there is replaced, never written
through, and what it pointed to is left as it was.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from ci import cli, command
from ci.gates.serving.llama import LlamaServer, ServerLaunch
from tests.support.project import Project

OUTSIDE = "what the link points to, outside the checkout\n"


def planted(at: Path, tmp_path: Path) -> Path:
    """A link at ``at`` to a file outside, returned."""
    outside = tmp_path / "outside" / at.name
    outside.parent.mkdir(parents=True, exist_ok=True)
    outside.write_text(OUTSIDE)
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(outside)
    return outside


def test_the_crash_log_is_never_written_through_a_link(project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = planted(project.root / "build" / cli.CRASH_LOG, tmp_path)

    def crash(_args: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr("ci.commands.verify_pin.main", crash)
    r = project.ci("verify-pin")
    assert r.code == cli.INTERNAL_ERROR
    assert outside.read_text() == OUTSIDE
    log = project.root / "build" / cli.CRASH_LOG
    assert not log.is_symlink()
    assert "RuntimeError: a bug" in log.read_text()


def test_test_backend_ops_logs_are_never_written_through_a_link(project: Project, tmp_path: Path) -> None:
    binary = tmp_path / "test-backend-ops"
    binary.write_text(f"#!{sys.executable}\nprint('Testing 1 devices')\n")
    binary.chmod(0o755)
    logs = tmp_path / "gates" / "backend_ops-logs"
    console = planted(logs / "test-backend-ops.CPU.GATED_DELTA_NET.log", tmp_path)
    sql = planted(logs / "test-backend-ops.CPU.sql", tmp_path)
    r = project.ci("backend-ops", "--device", "CPU", "--binary", str(binary), "--expect", "GATED_DELTA_NET=36", "--pinned-commit", "none", "--out", str(tmp_path / "gates"))
    assert r.code == 7, r.out + r.err  # the stand-in is no test-backend-ops: the gate fails, and writes its logs
    assert console.read_text() == OUTSIDE
    assert sql.read_text() == OUTSIDE
    assert (logs / "test-backend-ops.CPU.GATED_DELTA_NET.log").read_text() == "Testing 1 devices\n"


def test_a_servers_log_is_never_written_through_a_link(tmp_path: Path) -> None:
    log_path = tmp_path / "logs" / "baseline.log"
    outside = planted(log_path, tmp_path)
    launch = ServerLaunch("baseline", (sys.executable, "-c", "print('a server that ends')"), "127.0.0.1", 9)
    server = LlamaServer(launch, log_path)
    server.start()
    while server.poll() is None:  # it prints and ends
        time.sleep(0.01)
    server.stop()
    assert outside.read_text() == OUTSIDE
    assert log_path.read_text() == "a server that ends\n"


def test_a_log_that_is_a_folder_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "x.log").mkdir()
    with pytest.raises(IsADirectoryError) as refused:
        command.open_log(tmp_path / "x.log")
    assert refused.value.filename == str(tmp_path / "x.log")
    assert os.path.isdir(tmp_path / "x.log")
