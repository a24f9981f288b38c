"""A real HTTP server in a thread that holds the shapes of GitHub's REST API the posting uses (commit statuses, a pull
request's comments, paged) and answers as GitHub does when it will not: 401 without the token, 404 for a repository
it does not hold, and whatever failures a test queues first (5xx, 429 with Retry-After, a secondary rate limit)."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "ghp_fixture-token"
STATES = ("error", "failure", "pending", "success")


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeGitHub:
    repos: set[str]
    port: int = 0
    requests: list[Seen] = field(default_factory=list)
    statuses: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    comments: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    failures: list[tuple[str, str, int, dict[str, str], dict[str, Any]]] = field(default_factory=list)  # (method, path regex, status, headers, body)
    next_id: int = 1000

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail(self, method: str, path: str, status: int, headers: dict[str, str] | None = None, message: str = "") -> None:
        """Answer the next request matching ``method`` and the ``path`` regex with ``status``, once."""
        self.failures.append((method, path, status, headers or {}, {"message": message} if message else {}))

    def add_comment(self, repo: str, pr: int, body: str) -> dict[str, Any]:
        self.next_id += 1
        comment = {"id": self.next_id, "body": body, "html_url": f"https://github.com/{repo}/pull/{pr}#issuecomment-{self.next_id}"}
        self.comments.setdefault((repo, pr), []).append(comment)
        return comment

    def answer(self, method: str, url: str, headers: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        path = urlsplit(url).path
        self.requests.append(Seen(method, url, headers, body))
        for i, (verb, pattern, status, extra, said) in enumerate(self.failures):
            if verb == method and re.fullmatch(pattern, path):
                del self.failures[i]
                return status, extra, said
        if headers.get("authorization") != f"Bearer {TOKEN}":
            return 401, {}, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}
        if headers.get("accept") != "application/vnd.github+json":
            return 415, {}, {"message": "Unsupported Media Type"}
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/(.*)", path)
        if not m or m.group(1) not in self.repos:
            return 404, {}, {"message": "Not Found"}
        repo, rest = m.group(1), m.group(2)
        if method == "POST" and (s := re.fullmatch(r"statuses/([0-9a-f]{40})", rest)):
            if not isinstance(body, dict) or body.get("state") not in STATES or not body.get("context"):
                return 422, {}, {"message": "Validation Failed"}
            self.statuses.setdefault((repo, s.group(1)), []).append(body)
            return 201, {}, {"id": len(self.statuses), **body}
        if (c := re.fullmatch(r"issues/(\d+)/comments", rest)) and method in ("GET", "POST"):
            pr = int(c.group(1))
            if method == "POST":
                if not isinstance(body, dict) or not isinstance(body.get("body"), str):
                    return 422, {}, {"message": "Validation Failed"}
                return 201, {}, self.add_comment(repo, pr, body["body"])
            query = parse_qs(urlsplit(url).query)
            per_page, page = int(query.get("per_page", ["30"])[0]), int(query.get("page", ["1"])[0])
            return 200, {}, self.comments.get((repo, pr), [])[(page - 1) * per_page : page * per_page]
        if method == "PATCH" and (c := re.fullmatch(r"issues/comments/(\d+)", rest)):
            for comments in self.comments.values():
                for comment in comments:
                    if comment["id"] == int(c.group(1)):
                        comment["body"] = body["body"]
                        return 200, {}, comment
            return 404, {}, {"message": "Not Found"}
        return 404, {}, {"message": "Not Found"}


@contextlib.contextmanager
def fake_github(*repos: str) -> Iterator[FakeGitHub]:
    github = FakeGitHub(set(repos))

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            status, extra, said = github.answer(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            data = json.dumps(said).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    github.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield github
    finally:
        server.shutdown()
        server.server_close()
