"""A server the gates start through the launcher imports the launcher's source, not bytecode left beside it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ci.errors import ServerFailed
from ci.gates.serving import launcher as launcher_files
from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports
from tests.gates.test_route_gate import BAD, GOOD, plant_stale_bytecode


def test_a_server_started_by_a_gate_imports_the_source_not_stale_bytecode(tmp_path: Path) -> None:
    """The equivalence gate runs ``python -m serve serve`` from the checkout: a good .pyc planted in serve/__pycache__
    ran in place of the bad serve/*.py that the launcher's digest and the wheel hold."""
    source = tmp_path / "src"
    source.mkdir()
    planted = plant_stale_bytecode(source / "verdict.py", GOOD, BAD)
    argv = (sys.executable, "-c", "import verdict; print('launcher ran with OK =', verdict.OK)")
    log = tmp_path / "server.log"
    with pytest.raises(ServerFailed), LlamaServer(ServerLaunch("baseline", argv, "127.0.0.1", free_ports(1)[0]), log, cwd=source):
        pass  # it exits before it is ever healthy; what it imported is in its log
    assert log.read_text() == "launcher ran with OK = None\n"
    assert [p.read_bytes() for p in (source / "__pycache__").iterdir()] == [planted]  # neither read nor written


def test_the_launchers_bytecode_folder_is_one_per_process_and_goes_with_it(tmp_path: Path) -> None:
    """Every launcher of a command compiles into one folder (launcher_files.process_bytecode), removed when the command exits."""
    program = "from ci.gates.serving import launcher as l; a = l.process_bytecode(); b = l.process_bytecode(); assert a == b; print(a[l.BYTECODE_FOLDER])"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=tmp_path)
    folder = Path(done.stdout.strip())
    assert folder.name.startswith("onebit-bytecode-")
    assert not folder.exists()


def test_the_launchers_bytecode_is_written_to_its_folder_even_under_pythondontwritebytecode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With PYTHONDONTWRITEBYTECODE passed on, nothing reached the folder and every launcher compiled everything again."""

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    source = tmp_path / "src"
    source.mkdir()
    (source / "written.py").write_text("OK = True\n")
    argv = (sys.executable, "-c", "import written")
    with pytest.raises(ServerFailed), LlamaServer(ServerLaunch("baseline", argv, "127.0.0.1", free_ports(1)[0]), tmp_path / "server.log", cwd=source):
        pass
    folder = Path(launcher_files.process_bytecode()[launcher_files.BYTECODE_FOLDER])
    assert [p.name for p in folder.rglob("written.*.pyc")] != []
    assert not (source / "__pycache__").exists()  # the tree is not written


class InterruptedAsItStarts(subprocess.Popen[bytes]):
    """Ctrl-C reaches this process the moment after the server starts (the server, in a session of its own, does not get it)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-overload]
        os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_as_the_server_starts_stops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start was outside the block that stops the server on an error, and the server was not known yet: it ran on."""
    argv = (sys.executable, "-c", "import time; time.sleep(300)")
    launch = ServerLaunch("baseline", argv, "127.0.0.1", free_ports(1)[0], env=(("TEST_PROCESS_TAG", str(tmp_path)),))
    monkeypatch.setattr(subprocess, "Popen", InterruptedAsItStarts)
    with pytest.raises(KeyboardInterrupt), LlamaServer(launch, tmp_path / "server.log"):
        pass
    monkeypatch.undo()
    left = [p for p in psutil.process_iter() if tagged(p, tmp_path)]
    for p in left:
        p.kill()
    assert left == []


def tagged(p: psutil.Process, tag: Path) -> bool:
    with contextlib.suppress(psutil.Error):
        return p.environ().get("TEST_PROCESS_TAG") == str(tag) and p.status() != psutil.STATUS_ZOMBIE
    return False
