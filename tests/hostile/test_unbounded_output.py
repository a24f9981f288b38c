"""A program's output is bounded in memory (issue 43, item 5). A program that printed 1.5 GB without a newline took
1.5 GB of the ci process (Python read it as one line); under a memory limit the reader thread died with MemoryError,
and the gate judged an empty output with no error. Now memory holds a bounded tail and a byte count, the rest goes to
the log, and a program past the limit is ended with one line naming it.

The limits are made small here (the same code, a megabyte instead of 64): what a test can print in a second.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from ci import cli, command
from tests.support.project import Project

MiB = 1 << 20
# 8 MiB without a newline, then it waits: a stand-in for 1.5 GB at these limits (ended, or at the run's timeout)
NO_NEWLINE = "import sys, time\nsys.stdout.write('x' * (8 << 20)); sys.stdout.flush(); time.sleep(30)\n"


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(command, "KEPT_LIMIT", MiB)
    monkeypatch.setattr(command, "LOG_LIMIT", 4 * MiB)
    monkeypatch.setattr(command, "LINE_LIMIT", 64 * 1024)


@pytest.mark.usefixtures("small_limits")
def test_a_program_printing_without_end_and_no_newline_is_ended_with_one_line() -> None:
    before = psutil.Process().memory_info().rss
    t0 = time.monotonic()
    with pytest.raises(command.OutputTooLong) as ended:
        command.run([sys.executable, "-c", NO_NEWLINE], check=False, quiet=True, what="endless", timeout=20)
    assert ended.value.message == command.PRINTED_TOO_MUCH.format(program="endless", limit="1 MiB", where=command.NOT_LOGGED)
    assert psutil.Process().memory_info().rss - before < 64 * MiB  # the tail, not the stream
    assert time.monotonic() - t0 < 60


@pytest.mark.usefixtures("small_limits")
def test_with_a_log_the_stream_goes_there_and_memory_keeps_a_tail(tmp_path: Path) -> None:
    program = "import sys\nfor i in range(40000): print(f'line {i:06d} ' + 'y' * 60)\n"  # 2.8 MB, past 1 MiB of memory
    with (tmp_path / "out.log").open("w") as log:
        done = command.run([sys.executable, "-c", program], log_file=log, quiet=True)
    logged = (tmp_path / "out.log").read_text()
    assert logged.count("\n") == 40000
    assert done.size == len(logged)
    assert done.cut
    assert len(done.output) <= MiB
    assert done.output.endswith("line 039999 " + "y" * 60 + "\n")


@pytest.mark.usefixtures("small_limits")
def test_past_the_logs_limit_the_program_is_ended_naming_its_log(tmp_path: Path) -> None:
    log_path = tmp_path / "out.log"
    with log_path.open("w") as log, pytest.raises(command.OutputTooLong) as ended:
        command.run([sys.executable, "-c", NO_NEWLINE], log_file=log, quiet=True, what="endless", timeout=20)
    assert ended.value.message == command.PRINTED_TOO_MUCH.format(program="endless", limit="4 MiB", where=str(log_path))
    assert log_path.stat().st_size <= 4 * MiB + 65536


@pytest.mark.usefixtures("small_limits")
def test_the_backend_ops_gate_on_a_program_printing_without_end_is_one_line(project: Project, tmp_path: Path) -> None:
    """The gate's own path: before, an empty output judged with no error; now one line, exit 6."""
    binary = tmp_path / "test-backend-ops"
    binary.write_text(f"#!{sys.executable}\n{NO_NEWLINE}")
    binary.chmod(0o755)
    r = project.ci("backend-ops", "--device", "CPU", "--binary", str(binary), "--expect", "GATED_DELTA_NET=36", "--pinned-commit", "none", "--out", str(tmp_path / "gates"))
    assert r.code == command.OutputTooLong.exit_code, r.out + r.err
    logs = tmp_path / "gates" / "backend_ops-logs" / "test-backend-ops.CPU.GATED_DELTA_NET.log"
    message = command.PRINTED_TOO_MUCH.format(program="test-backend-ops", limit="4 MiB", where=logs)
    assert r.err.splitlines()[-1] == cli.ERROR.format(message=message)
