"""A server busy in one long step of work is slow, not hung (issue 42's real-shaped set on the CPU): llama-server's main
loop answers /slots only between two steps, and one micro-batch of a 27B-wide model on two CPU cores takes longer than
the watch's HUNG_AFTER; the hung-server watch ended such a server as "/slots gave no answer". While its processes keep
spending CPU time it is working; one that answers nothing and spends nothing (a SIGSTOP, tests/hostile/test_hung_server.py)
is still ended in seconds."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from ci.gates.serving import llama
from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports

# a stand-in llama-server: one thread, so /slots waits while a request's one long step burns the CPU
STAND_IN = textwrap.dedent(
    """
    import http.server, json, sys, time
    port, step = int(sys.argv[1]), float(sys.argv[2])

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, obj):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self.answer({"status": "ok"})
            elif self.path == "/slots":
                self.answer([{"id": 0, "is_processing": False, "next_token": [{"n_decoded": 0}]}])
            else:
                self.send_error(404)

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            end, spins = time.monotonic() + step, 0
            while time.monotonic() < end:
                spins += 1
            self.answer({"content": "ok", "spins": spins})

    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)


def test_a_stand_in_server_busy_in_one_long_step_is_slow_not_hung(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llama, "HUNG_AFTER", 2.0)
    monkeypatch.setattr(llama, "ANSWER_WITHIN", 0.5)
    script = tmp_path / "stand_in_llama_server.py"
    script.write_text(STAND_IN)
    port = free_ports(1)[0]
    launch = ServerLaunch("busy", (sys.executable, str(script), str(port), "6"), "127.0.0.1", port)
    with LlamaServer(launch, tmp_path / "busy.log", health_timeout=30) as server:
        answer = server.post("/completion", {"prompt": "x"}, timeout=60)
    assert answer["content"] == "ok"
    assert answer["spins"] > 0
