"""No process is left after a timeout or Ctrl-C of any long-lived thing, with the real CPU binaries: test-backend-ops,
the bench's llama-servers and ``1bit serve``'s (the equivalence gate's two: tests/gates/equivalence/test_gate_slow.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from ci.gates.backend_ops import judge as backend_ops_judge
from ci.gates.tiny.models import TinyModels
from tests.support.binaries import llama_binary
from tests.support.processes import live_processes_naming
from tests.support.stand_in import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def spawn(*argv: str) -> subprocess.Popen[str]:
    """``argv`` in a session of its own, as a terminal's foreground job: Ctrl-C is SIGINT to its whole group."""
    return subprocess.Popen(list(argv), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def tree(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return []


def wait_for(what: Callable[[], bool], seconds: float, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        if proc.poll() is not None:
            pytest.fail(f"exited {proc.returncode} early: {proc.stdout.read() if proc.stdout else ''}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"not within {seconds} s")
        time.sleep(0.05)


def ctrl_c(proc: subprocess.Popen[str]) -> tuple[int, str]:
    os.killpg(proc.pid, signal.SIGINT)
    out = proc.communicate(timeout=60)[0]
    return proc.returncode, out


def still_running(seen: list[psutil.Process]) -> list[str]:
    out = []
    for p in seen:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {p.name()}")
        except psutil.NoSuchProcess:
            pass
    return out


def test_test_backend_ops_after_a_timeout_and_after_ctrl_c(tmp_path: Path) -> None:
    tbo = str(llama_binary("test-backend-ops"))
    ci = [sys.executable, "-m", "ci", "backend-ops", "--binary", tbo, "--device", "CPU", "--pinned-commit", "none", "--out", str(tmp_path / "out")]
    # MUL_MAT on the CPU takes minutes: a 1 s timeout cuts it short
    done = subprocess.run([*ci, "--expect", "MUL_MAT=1000", "--timeout", "1"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 7, done.stdout + done.stderr
    assert backend_ops_judge.HOW_TIMED_OUT.format(timeout=1) in done.stdout
    assert [p for p in live_processes_naming(tbo) if "MUL_MAT" in p] == []
    proc = spawn(*ci, "--expect", "MUL_MAT=1000", "--timeout", "300")
    seen: list[psutil.Process] = []

    def running() -> bool:
        seen[:] = [p for p in tree(proc) if p.name() == "test-backend-ops"]
        return bool(seen)

    wait_for(running, 30, proc)
    time.sleep(0.5)
    code, out = ctrl_c(proc)
    assert code == 130, out
    assert still_running(seen) == []


def test_the_bench_after_ctrl_c(tiny_models: TinyModels, tmp_path: Path) -> None:
    proc = spawn(
        sys.executable, "-m", "ci", "bench", "-m", str(tiny_models.target), "--llama-server", str(llama_binary("llama-server")), "--device", "cpu",
        "--config", "base=", "--config", f"draft=-- -md {tiny_models.drafter} --spec-type draft-simple", "--rounds", "50", "--logs", str(tmp_path / "logs"),
    )  # fmt: skip
    seen: list[psutil.Process] = []

    def serving() -> bool:
        seen[:] = [p for p in tree(proc) if p.name() == "llama-server"] or seen
        return bool(seen)

    wait_for(serving, 60, proc)
    time.sleep(0.5)
    code, out = ctrl_c(proc)
    assert code == 130, out
    assert still_running(seen) == []
    assert live_processes_naming(str(tiny_models.target)) == []


def test_1bit_serve_after_ctrl_c(tiny_models: TinyModels) -> None:
    port = free_port()
    proc = spawn(sys.executable, "-m", "serve", "serve", "-m", str(tiny_models.target), "--llama-server", str(llama_binary("llama-server")), "--device", "cpu", "--port", str(port))
    seen: list[psutil.Process] = []

    def serving() -> bool:
        seen[:] = [p for p in tree(proc) if p.name() == "llama-server"] or seen
        return bool(seen) and any(c.laddr.port == port for p in seen for c in p.net_connections() if c.status == psutil.CONN_LISTEN)

    wait_for(serving, 60, proc)
    code, out = ctrl_c(proc)
    assert code in (0, 130, 128 + signal.SIGINT), out
    assert still_running(seen) == []


def test_a_benchmark_after_sigterm_leaves_no_server_and_no_models() -> None:
    """A CI runner cancels with SIGTERM, to the benchmark's process alone: its llama-servers and the folder of
    generated models it made go too (before, both stayed)."""
    proc = spawn(sys.executable, "benchmarks/shared_baseline.py", "--llama-server", str(llama_binary("llama-server")), "--rounds", "3")
    seen: list[psutil.Process] = []

    def serving() -> bool:
        seen[:] = [p for p in tree(proc) if p.name() == "llama-server"] or seen
        return bool(seen)

    wait_for(serving, 120, proc)
    argv = seen[0].cmdline()
    models = Path(argv[argv.index("-m") + 1]).parent
    assert models.is_dir()
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert out.strip().splitlines()[-1] == "benchmark: interrupted by SIGTERM", out
    assert "Traceback" not in out
    assert still_running(seen) == []
    assert not models.exists()
