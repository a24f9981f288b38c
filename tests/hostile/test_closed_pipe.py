"""A closed stdout mid-build (``nox -s build | head -1``, issue 36, item 4). The build's progress is printed by the
thread that reads ninja's output (ci/command.py's pump): its write to the closed pipe raised there, the thread died
with a traceback, and nothing read ninja's output any more, so a program with more to say blocked on the full pipe
and the command waited for it forever. The main thread's own write to the closed pipe was one line already.

Now the reader stops reporting, ends the program's tree and keeps draining, the error is raised in the main thread,
and ci says in one line that its output was closed (no traceback, no "Exception ignored" at exit), exit 74."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ci import cli
from ci.compile import cmake
from tests.support.messages import pattern
from tests.support.project import Project

ROOT = Path(__file__).resolve().parents[2]
TRACEBACKS = ("Traceback", "Exception in thread", "Exception ignored")

# run() with a progress callback that prints, as the build's is, while the reader of this process's stdout is gone
REPORTER = """\
import sys
from ci.command import run
from ci.commands import say
try:
    run([sys.executable, "-c", "for i in range(20000): print(i)"], on_line=say)
except BrokenPipeError:
    sys.stderr.write("raised BrokenPipeError\\n")
"""


def closed_stdout() -> int:
    """The write end of a pipe whose read end is closed: every write raises EPIPE."""
    read, write = os.pipe()
    os.close(read)
    return write


def run_closed(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``argv`` with a closed stdout, in a session of its own that is ended whole if it outlives ``timeout``."""
    out = closed_stdout()
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    os.close(out)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        return subprocess.CompletedProcess(argv, -signal.SIGKILL, "", err + "\n(timed out)")
    return subprocess.CompletedProcess(argv, proc.returncode, "", err)


def test_a_program_whose_progress_goes_to_a_closed_stdout_is_ended_and_the_error_raised() -> None:
    done = run_closed([sys.executable, "-c", REPORTER], timeout=30)
    assert not any(t in done.stderr for t in TRACEBACKS), done.stderr
    assert done.stderr == "raised BrokenPipeError\n"
    assert done.returncode == 0


def test_a_closed_stdout_is_one_line_naming_it() -> None:
    done = run_closed([sys.executable, "-m", "ci", "matrix", "--profiles", "cpu"])
    assert done.returncode == cli.IO_ERROR
    assert done.stderr == cli.ERROR.format(message=cli.OUTPUT_CLOSED) + "\n"


def test_a_build_whose_stdout_closes_mid_build_stops_in_one_line(build_project: Project) -> None:
    argv = [sys.executable, "-m", "ci", "--root", str(build_project.root), "build", "--profile", "cpu", "--remote", str(build_project.fork.path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if pattern(cmake.CONFIGURE_DONE).match(line) or line.startswith(cmake.CONFIGURE_REUSED):
                break
        proc.stdout.close()  # the reader goes (head -1): ninja's progress is written to a closed pipe
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not any(t in err for t in TRACEBACKS), err
    assert err.endswith(cli.ERROR.format(message=cli.OUTPUT_CLOSED) + "\n"), err
    assert proc.returncode == cli.IO_ERROR
