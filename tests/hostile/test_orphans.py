"""Nothing outlives a gate (issue 36, item 2): a program that orphans a child, by ``( sleep & )`` or by a double fork
with setsid, leaves nothing once it is stopped or has exited.

Before, an orphan was reparented to the machine's init, out of the tree that a server's stop and :func:`end_trees`
read: a llama-server that orphaned its children left 8 processes after a passing gate. The command layer is now the
child subreaper of what it starts (Linux), so the orphans come back to it, known by the mark of the tree they came
from (its environment), and end with that tree and only with it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from ci import command
from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")

TAG = "TEST_PROCESS_TAG"
ORPHANS = 8  # as many as one passing gate left

# Four double forks with setsid (the daemon's way) and four shell orphans ``( sleep & )``; then it serves /health.
DOUBLE_FORKING_SERVER = """
import http.server, os, sys
def daemon():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "300"])
        os._exit(0)
    os.wait()
for _ in range(4):
    daemon()
    os.system("( sleep 301 & )")
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def tagged(tag: str) -> list[psutil.Process]:
    """Live processes whose environment carries ``TAG=tag``."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.environ().get(TAG) == tag and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


@contextlib.contextmanager
def cleaned(tag: str) -> Iterator[None]:
    """Whatever the test leaves, ended afterwards (a failing test must not leave its orphans to the next)."""
    try:
        yield
    finally:
        for p in tagged(tag):
            with contextlib.suppress(psutil.Error):
                p.kill()


def wait_for(count: int, tag: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while len([p for p in tagged(tag) if p.name() == "sleep"]) < count:
        assert time.monotonic() < deadline, f"not {count} orphans within {seconds} s"
        time.sleep(0.05)


def script(path: Path, tag: str, text: str) -> str:
    path.write_text(f"#!/bin/sh\nexport {TAG}={tag}\n" + text)
    path.chmod(0o755)
    return str(path)


def test_a_server_that_orphans_its_children_leaves_nothing_once_stopped(tmp_path: Path) -> None:
    tag = str(tmp_path)
    (tmp_path / "server.py").write_text(DOUBLE_FORKING_SERVER)
    port = free_ports(1)[0]
    launch = ServerLaunch("baseline", (sys.executable, str(tmp_path / "server.py"), str(port)), "127.0.0.1", port, env=((TAG, tag),))
    with cleaned(tag):
        with LlamaServer(launch, tmp_path / "server.log", health_timeout=60):
            wait_for(ORPHANS, tag)
        left = [f"{p.pid} {p.name()}" for p in tagged(tag)]
        assert left == [], "the server's orphans outlived it"


def test_a_program_run_to_its_end_leaves_no_orphan(tmp_path: Path) -> None:
    tag = str(tmp_path)
    orphaning = script(tmp_path / "orphaning.sh", tag, "( sleep 300 & )\nsetsid sh -c 'sleep 301 &'\n( setsid sleep 302 & )\nsleep 0.5\n")
    with cleaned(tag):
        done = command.run([orphaning], quiet=True, timeout=60)
        assert done.returncode == 0
        assert [f"{p.pid} {p.name()}" for p in tagged(tag)] == []


def test_a_timed_out_programs_orphans_end_with_it(tmp_path: Path) -> None:
    tag = str(tmp_path)
    hanging = script(tmp_path / "hanging.sh", tag, f"( sleep 300 & )\nsetsid sh -c 'sleep 301 &'\ntouch {tmp_path}/up\nsleep 303\n")
    with cleaned(tag):
        done = command.run([hanging], quiet=True, timeout=1.5, check=False)
        assert done.timed_out
        assert [f"{p.pid} {p.name()}" for p in tagged(tag)] == []


def test_programs_run_together_leave_no_orphan(tmp_path: Path) -> None:
    tag = str(tmp_path)
    a = script(tmp_path / "a.sh", tag, "( sleep 300 & )\nsleep 0.3\n")
    b = script(tmp_path / "b.sh", tag, "setsid sh -c 'sleep 301 &'\nsleep 0.3\n")
    with cleaned(tag):
        command.run_together([[a], [b]], quiet=True, timeout=60)
        assert [f"{p.pid} {p.name()}" for p in tagged(tag)] == []


def test_another_trees_orphans_are_left_to_it(tmp_path: Path) -> None:
    """A program that ends while a server runs: its orphans end, the server's stay until the server is stopped."""
    server_tag, program_tag = str(tmp_path / "server"), str(tmp_path / "program")
    (tmp_path / "server.py").write_text(DOUBLE_FORKING_SERVER)
    port = free_ports(1)[0]
    launch = ServerLaunch("baseline", (sys.executable, str(tmp_path / "server.py"), str(port)), "127.0.0.1", port, env=((TAG, server_tag),))
    orphaning = script(tmp_path / "orphaning.sh", program_tag, "( sleep 300 & )\n")
    with cleaned(server_tag), cleaned(program_tag):
        with LlamaServer(launch, tmp_path / "server.log", health_timeout=60):
            wait_for(ORPHANS, server_tag)
            command.run([orphaning], quiet=True, timeout=60)
            assert tagged(program_tag) == []
            assert len([p for p in tagged(server_tag) if p.name() == "sleep"]) == ORPHANS
        assert tagged(server_tag) == []
