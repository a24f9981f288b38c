from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ci import command, errors, processes
from ci import environment as program_environment
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


def script(path: Path, text: str) -> str:
    """An executable shell script whose processes carry TEST_PROCESS_TAG, the test's folder (:func:`sleeps_of`)."""
    path.write_text(f"#!/bin/sh\nexport TEST_PROCESS_TAG={path.parent}\n" + text)
    path.chmod(0o755)
    return str(path)


def sleeps_of(tmp_path: Path) -> list[psutil.Process]:
    """The live processes of :func:`script`\\ s in ``tmp_path`` (each test's own, and no one else's)."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.environ().get("TEST_PROCESS_TAG") == str(tmp_path) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


def test_programs_run_together_each_with_its_own_output(tmp_path: Path) -> None:
    """Each waits for the other's flag: one after the other, the first would wait out its 60 s and fail."""
    a = script(tmp_path / "a.sh", f"touch {tmp_path}/a.flag\nfor i in $(seq 600); do [ -e {tmp_path}/b.flag ] && echo a done && exit 0; sleep 0.1; done\nexit 1\n")
    b = script(tmp_path / "b.sh", f"touch {tmp_path}/b.flag\nfor i in $(seq 600); do [ -e {tmp_path}/a.flag ] && echo b done && exit 3; sleep 0.1; done\nexit 1\n")
    first, second = command.run_together([[a], [b]], timeout=120, quiet=True)
    assert (first.returncode, first.output, first.timed_out) == (0, "a done\n", False)
    assert (second.returncode, second.output, second.timed_out) == (3, "b done\n", False)
    assert first.argv == (a,)
    assert first.seconds > 0
    assert second.seconds > 0


def test_a_timeout_ends_only_the_program_past_it(tmp_path: Path) -> None:
    hang = script(tmp_path / "hang.sh", "sleep 300 &\nsleep 301\n")
    quick = script(tmp_path / "quick.sh", "echo quick\n")
    hung, done = command.run_together([[hang], [quick]], timeout=1.0, quiet=True)
    assert hung.timed_out
    assert hung.returncode != 0  # killed, or the shell's 143 after its sleep was
    assert (done.timed_out, done.returncode, done.output) == (False, 0, "quick\n")
    assert sleeps_of(tmp_path) == [], "a sleep of the timed-out tree outlived it"


def test_sigterm_while_programs_run_together_ends_every_tree(tmp_path: Path) -> None:
    """The third program sends SIGTERM to this process once the other two are running, as a CI runner's cancel would."""
    hangs = [script(tmp_path / f"hang{n}.sh", f"touch {tmp_path}/{n}.up\nsleep 300 &\nsleep 301\n") for n in (1, 2)]
    cancel = script(tmp_path / "cancel.sh", f"while [ ! -e {tmp_path}/1.up ] || [ ! -e {tmp_path}/2.up ]; do sleep 0.05; done\nsleep 0.2\nkill -TERM $PPID\nsleep 302\n")
    with processes.signals_as_interrupt(), pytest.raises(processes.Terminated):
        command.run_together([[hangs[0]], [hangs[1]], [cancel]], timeout=120, quiet=True)
    assert sleeps_of(tmp_path) == [], "a program run together outlived SIGTERM"


def test_a_program_that_cannot_start_ends_those_started_before_it(tmp_path: Path) -> None:
    hang = script(tmp_path / "hang.sh", "sleep 300\n")
    with pytest.raises(ToolchainError, match=re.escape(command.NOT_ON_PATH.format(program="no-such-program-here"))):
        command.run_together([[hang], ["no-such-program-here"]], timeout=120, quiet=True)
    assert sleeps_of(tmp_path) == []


def test_a_tree_still_forking_when_it_is_ended_leaves_nothing(tmp_path: Path) -> None:
    """The shell forks a sleep after another, so it is forking when the timeout ends it: read once, the tree missed
    the sleeps born after it was read, and they outlived it (freeze stops each process before the tree is read)."""
    forker = script(tmp_path / "forker.sh", "for i in $(seq 2000); do sleep 300 & done\nwait\n")
    done = command.run([forker], timeout=0.5, check=False, quiet=True)
    assert done.timed_out
    assert sleeps_of(tmp_path) == []


def test_an_interrupt_while_trees_are_ended_waits_for_the_teardown(tmp_path: Path) -> None:
    """Between a tree's SIGSTOP and its SIGCONT, a Ctrl-C raised at once would leave processes stopped for good: it is
    held until the teardown is over, then raised."""
    hang = script(tmp_path / "hang.sh", "sleep 300 &\nsleep 301\n")
    proc = subprocess.Popen([hang])
    try:
        while len(processes.descendants(proc.pid)) < 2:
            time.sleep(0.02)

        def ctrl_c_then_end() -> None:
            with processes.signals_held():
                os.kill(os.getpid(), signal.SIGINT)  # held: the tree is still ended in full below
                processes.end_tree(proc, grace=5.0)
                ended.append(proc.returncode)

        ended: list[int | None] = []
        with pytest.raises(KeyboardInterrupt):
            ctrl_c_then_end()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert ended != [None]
    assert len(ended) == 1
    assert sleeps_of(tmp_path) == []


def test_a_program_that_forks_on_sigterm_leaves_nothing(tmp_path: Path) -> None:
    """It ignores SIGTERM and starts a sleep when it gets one: SIGKILL went to the tree read before SIGTERM, and the
    sleep born after it outlived the shell. What outlives SIGTERM is frozen again, and read again, before SIGKILL."""
    trap = script(tmp_path / "trap.sh", f"trap 'sleep 300 &' TERM\ntouch {tmp_path}/up\nwhile :; do sleep 0.1; done\n")
    proc = subprocess.Popen([trap])
    try:
        while not (tmp_path / "up").exists():
            assert proc.poll() is None
            time.sleep(0.02)
        processes.end_tree(proc, grace=1.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = sleeps_of(tmp_path)
    for p in left:
        p.kill()
    assert left == []


class SignalledAsItStarts(subprocess.Popen[str]):
    """A program that this process gets a signal the moment after it starts (``signum``, set by the test)."""

    signum = signal.SIGTERM

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-overload]
        os.kill(os.getpid(), self.signum)


@pytest.mark.parametrize("together", [False, True])
def test_sigterm_as_a_program_starts_ends_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, together: bool) -> None:
    """A SIGTERM between the program's start and its being known to the caller left it running."""
    hang = script(tmp_path / "hang.sh", "sleep 300\n")
    monkeypatch.setenv("TEST_PROCESS_TAG", str(tmp_path))  # the shell's own: it may not have started its sleep yet
    monkeypatch.setenv(program_environment.PASS_VAR, "TEST_PROCESS_TAG")  # passed on past the allow-list, as an operator names one
    monkeypatch.setattr(subprocess, "Popen", SignalledAsItStarts)
    with processes.signals_as_interrupt(), pytest.raises(processes.Terminated):
        command.run_together([[hang], [hang]], timeout=120, quiet=True) if together else command.run([hang], timeout=120, quiet=True)
    monkeypatch.undo()
    left = sleeps_of(tmp_path)
    for p in left:
        p.kill()
    assert left == []


def test_a_finished_programs_pid_taken_by_another_process_is_left_alone(tmp_path: Path) -> None:
    """A program reaped already (run_together's programs that ended before Ctrl-C) may have its pid reused: its tree
    was read by pid, and another process's children were stopped and killed. The reuse is played here by the pid."""
    stranger = subprocess.Popen([script(tmp_path / "stranger.sh", "sleep 300 &\nwait\n")])
    try:
        while not processes.descendants(stranger.pid):
            time.sleep(0.02)
        finished = subprocess.Popen(["true"])
        finished.wait()
        finished.pid = stranger.pid
        processes.end_trees([finished], grace=1.0)
        assert [p.status() for p in sleeps_of(tmp_path) if p.name() == "sleep"] == [psutil.STATUS_SLEEPING]
    finally:
        stranger.kill()
        stranger.wait()
        for p in sleeps_of(tmp_path):
            p.kill()


def test_a_signal_as_held_signals_are_put_back_leaves_no_handler_holding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C the moment SIGINT's handler was put back raised there, and SIGTERM's and SIGHUP's stayed the holding
    ones: every later SIGTERM was swallowed."""
    real = signal.signal

    def put_back(signum: int, handler: object) -> object:
        old = real(signum, handler)  # type: ignore[arg-type]
        if signum == signal.SIGINT and handler is signal.default_int_handler:
            os.kill(os.getpid(), signal.SIGINT)
        return old

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setattr(signal, "signal", put_back)
    try:
        with pytest.raises(KeyboardInterrupt), processes.signals_held():
            pass
        monkeypatch.undo()
        after = {s: signal.getsignal(s) for s in before}
    finally:
        for s, handler in before.items():
            real(s, handler)
    assert after == before


def test_the_environment_is_the_allow_list_the_declared_names_and_what_the_caller_sets() -> None:
    source = {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "GGML_X": "1", "VULKAN_SDK": "/sdk", "EDITOR": "vi", "ONEBIT_LEDGER_KEY": "k"}
    assert program_environment.environment(source) == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "GGML_X": "1"}
    declared = program_environment.environment(source, declared=("VULKAN_SDK", "ONEBIT_LEDGER_KEY"), given={"ROCM_PATH": "/opt/rocm", "ONEBIT_LEDGER_WITNESS": "/w"})
    assert declared == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "GGML_X": "1", "VULKAN_SDK": "/sdk", "ROCM_PATH": "/opt/rocm"}
    assert program_environment.recorded_environment(source, ("VULKAN_SDK",)) == {"GGML_X": "1", "VULKAN_SDK": "/sdk"}
    assert list(program_environment.recorded_environment({"VK_B": "2", "GGML_A": "1"})) == ["GGML_A", "VK_B"]


def test_each_program_gets_a_mark_of_its_own_and_the_folder_it_is_given(tmp_path: Path) -> None:
    show = [sys.executable, "-c", f"import os; print(os.environ[{processes.TREE_VAR!r}], os.getcwd())"]
    first = command.run(show, quiet=True, cwd=tmp_path).output.split()
    second = command.run(show, quiet=True, env={"PATH": os.environ["PATH"], processes.TREE_VAR: "inherited"}).output.split()
    assert first[1] == str(tmp_path)
    assert len({first[0], second[0], "inherited"}) == 3
