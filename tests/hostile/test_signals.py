"""SIGTERM and SIGHUP end what Ctrl-C ends (issue 24): a CI runner cancels a job with SIGTERM to the job's process,
not to its group, and a closed terminal sends SIGHUP. The build's cmake and ninja, the gate's pytest, and a bump's
half-written pin all go, as they do on Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ci import cli, files
from ci.compile import cmake
from tests.support.build import build_cpu
from tests.support.messages import pattern
from tests.support.processes import live_in_group
from tests.support.project import Project

ROOT = Path(__file__).resolve().parents[2]


def spawn(project: Project, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ci", "--root", str(project.root), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=ROOT,
    )  # fmt: skip


def below_names(proc: subprocess.Popen[str], word: str) -> bool:
    """Whether a live process below ``proc`` has ``word`` in its command line. A child that ends while it is looked
    at (a zombie's command line raises) is not it: the route gate's test once failed on a git that had just ended."""
    for child in psutil.Process(proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if word in " ".join(child.cmdline()):
                return True
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_build_alone_ends_cmake_and_ninja(build_project: Project, sig: signal.Signals) -> None:
    assert build_cpu(build_project).code == 0
    proc = spawn(build_project, "build", "--profile", "cpu", "-DFIXTURE_SLOW=ON")
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if pattern(cmake.CONFIGURE_DONE).match(line):
            break
    deadline = time.monotonic() + 30
    while not below_names(proc, "sleep"):
        assert time.monotonic() < deadline, "".join(seen)
        time.sleep(0.1)
    os.kill(proc.pid, sig)  # the runner's cancel: this process alone, not its group
    rest = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + sig, "".join(seen) + rest
    assert cli.INTERRUPTED_BY.format(signal=sig.name) in rest
    assert "Traceback" not in rest
    assert not (build_project.root / "build" / "cpu" / "build.json").exists()
    assert live_in_group(proc.pid) == []  # cmake, ninja and the sleep went with it


def test_sigterm_during_the_route_gate_ends_its_pytest(build_project: Project) -> None:
    assert build_cpu(build_project).code == 0
    proc = spawn(build_project, "gpu-tests", "--profile", "cpu", "--gate", "route")
    deadline = time.monotonic() + 60
    while not below_names(proc, "pytest"):
        assert proc.poll() is None
        assert time.monotonic() < deadline
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 143, out
    assert cli.INTERRUPTED_BY.format(signal="SIGTERM") in out
    assert live_in_group(proc.pid) == []


def test_sigterm_half_way_through_a_bump_restores_the_pin_and_the_gitlink(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    before = project.state()
    gitlink = project.gitlink()
    real = files.write_atomic

    def terminated(path: Path, data: bytes | str, *, mode: int | None = None) -> None:
        real(path, data, mode=mode)
        if path.name == ".gitmodules":  # pins.yaml and .gitmodules written: the runner cancels the job
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr("ci.commands.bump_pin.write_atomic", terminated)
    r = project.ci("bump-pin", project.fork.c5[:7], "--branch", "many", "--remote", str(project.fork.path))
    assert r.code == 143, r.err
    assert r.err == cli.INTERRUPTED_BY.format(signal="SIGTERM") + "\n"
    assert project.state() == before
    assert project.gitlink() == gitlink
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is this command's alone
