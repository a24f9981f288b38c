"""A recording stand-in for llama-server: it writes its argv, environment, pid and parent to a JSON file, answers
GET /health on its --port, and exits on SIGTERM/SIGINT/SIGHUP with a status of its own (so a test can tell that
serve passed the child's status on, and not a signal's 128 + N). With STAND_IN_EXIT set it records and exits.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

EXIT_ON_SIGNAL = {"SIGTERM": 43, "SIGINT": 42, "SIGHUP": 41}

_SCRIPT = """\
#!{python}
import http.server, json, os, signal, sys

RECORD = {record!r}
EXIT_ON_SIGNAL = {exits!r}


def write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


def stop(signum, _frame):
    name = signal.Signals(signum).name
    write(RECORD + ".signal", {{"signal": name}})
    os._exit(EXIT_ON_SIGNAL[name])


for name in EXIT_ON_SIGNAL:
    signal.signal(getattr(signal, name), stop)
args = sys.argv[1:]
record = {{"argv": args, "env": dict(os.environ), "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0)}}
if "STAND_IN_EXIT" in os.environ:
    write(RECORD, record)
    sys.exit(int(os.environ["STAND_IN_EXIT"]))


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{{"status": "ok"}}' if self.path == "/health" else b"{{}}"
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


server = http.server.HTTPServer((args[args.index("--host") + 1], int(args[args.index("--port") + 1])), Health)
write(RECORD, record)
server.serve_forever()
"""


def write_stand_in(path: Path, record: Path) -> Path:
    """An executable stand-in at ``path`` that records to ``record``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_SCRIPT.format(python=sys.executable, record=str(record), exits=EXIT_ON_SIGNAL))
    path.chmod(0o755)
    return path


def write_manifest(root: Path, profile: str, binary: Path, commit: str = "a" * 40) -> Path:
    """``build/<profile>/build.json`` recording ``binary`` (relative to the manifest) and its sha256, built at
    ``commit`` with no patches; ``root``'s pins.yaml is (re)written to pin ``commit`` so the build is current."""
    (root / "pins.yaml").write_text(f"# marks the onebit-ci root for this case\nfork:\n  commit: {commit}\n")
    manifest = root / "build" / profile / "build.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "pin": {"commit": commit},
        "patches": {"digest": hashlib.sha256().hexdigest(), "names": []},
        "binaries": {
            "llama-server": {
                "path": os.path.relpath(binary, manifest.parent),
                "sha256": hashlib.sha256(binary.read_bytes()).hexdigest(),
            }
        },
    }
    manifest.write_text(json.dumps(doc, indent=2))
    return manifest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until_healthy(record: Path, port: int, launcher: subprocess.Popen[str], timeout: float = 10.0) -> dict[str, object]:
    """The stand-in's record once it answers /health 200; fails early if the launcher exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if launcher.poll() is not None:
            raise AssertionError(f"the launcher exited with {launcher.returncode} before the stand-in was healthy")
        if record.exists():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as reply:
                    if reply.status == 200:
                        doc: dict[str, object] = json.loads(record.read_text())
                        return doc
            except (urllib.error.URLError, ConnectionError):
                pass
        time.sleep(0.02)
    raise AssertionError(f"the stand-in did not answer /health on port {port} within {timeout} s")


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
