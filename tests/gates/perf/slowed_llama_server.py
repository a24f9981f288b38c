"""A real llama-server with a planted decode slowdown: the slow tier's CPU llama-server behind a proxy that, on a
drafting server (``-md``), reports every decode as taking ``1 / (1 - slowed)`` times as long as it did.

The perf gate judges the servers' own timings (``timings.predicted_ms``), so to the gate this is a build whose
speculative decode got ``slowed`` (0.3: 30%) slower, on top of the real server's own timing noise on this machine;
the base server, and a drafting one with ``slowed`` 0, answer as the real server does. The fixture's llama-server
execs the launcher :func:`write_launcher` writes (``-DFIXTURE_LLAMA_SERVER``), which carries the real server's path
and ``slowed`` itself (the gates pass a program only the variables they name); writing it again changes the plant
without a rebuild. The real server runs as the proxy's child on a port of its own and goes with it.
"""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve()


def write_launcher(directory: Path, real: Path, slowed: float = 0.0) -> Path:
    """An executable that runs this file with this test run's Python, proxying ``real``, decodes ``slowed`` slower."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "slowed-llama-server"
    path.write_text(
        f"#!{sys.executable}\nimport runpy, sys\nsys.argv[1:1] = [{str(real)!r}, {str(slowed)!r}]\n"
        f"sys.argv[0] = {str(SCRIPT)!r}\nrunpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
    )
    path.chmod(0o755)
    return path


def _main() -> None:  # a proxy in one function: it runs as a script, without the tests' imports
    import http.server
    import json
    import os
    import signal
    import socket
    import subprocess
    import urllib.error
    import urllib.request

    real_server, planted, *args = sys.argv[1:]
    port = int(args[args.index("--port") + 1]) if "--port" in args else 8080
    drafting = any(a in ("-md", "--model-draft", "--spec-draft-model") for a in args)
    slowed = float(planted) if drafting else 0.0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        inner = s.getsockname()[1]
    real_args = [*args]
    if "--port" in real_args:
        real_args[real_args.index("--port") + 1] = str(inner)
    else:
        real_args += ["--port", str(inner)]
    real = subprocess.Popen([real_server, *real_args])

    def stop(*_: object) -> None:
        real.terminate()
        try:
            real.wait(10)
        except subprocess.TimeoutExpired:
            real.kill()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    class Handler(http.server.BaseHTTPRequestHandler):
        def forward(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0"))) if method == "POST" else None
            request = urllib.request.Request(f"http://127.0.0.1:{inner}{self.path}", data=body, method=method)
            request.add_header("Content-Type", self.headers.get("Content-Type", "application/json"))
            try:
                with urllib.request.urlopen(request, timeout=600) as answer:
                    code, data = answer.status, answer.read()
            except urllib.error.HTTPError as exc:
                code, data = exc.code, exc.read()
            except OSError:  # the real server is not listening yet
                code, data = 503, json.dumps({"error": {"code": 503, "message": "Loading model"}}).encode()
            if slowed and code == 200 and self.path.startswith("/completion"):
                doc = json.loads(data)
                timings = doc.get("timings")
                if isinstance(timings, dict) and isinstance(timings.get("predicted_ms"), int | float):
                    timings["predicted_ms"] = timings["predicted_ms"] / (1 - slowed)
                    data = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self.forward("GET")

        def do_POST(self) -> None:
            self.forward("POST")

        def log_message(self, *_args: object) -> None:
            pass

    print(f"slowed llama-server: port {port} -> {inner}, decode {100 * slowed:g}% slower", flush=True)
    try:
        http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
    finally:
        stop()


if __name__ == "__main__":
    _main()
