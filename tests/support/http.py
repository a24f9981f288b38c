"""A real HTTP server on a free port that answers what a test says: another server on a port, or a server
whose answers are hostile."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer


@contextlib.contextmanager
def answering(body: bytes, get: bool = False) -> Iterator[int]:
    """Its port, while it answers every POST (and, with ``get``, every GET) with ``body``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._answer()

        def do_GET(self) -> None:
            if get:
                self._answer()
            else:
                self.send_error(404)

        def _answer(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
