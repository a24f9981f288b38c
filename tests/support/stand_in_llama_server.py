"""A stand-in llama-server for the fast tier, where no real one is installed (the slow tier runs the real CPU one).

It speaks the part of llama-server's HTTP API the gates and the bench use (``/health``, ``/props``, ``/tokenize``,
``/completion`` with token ids, top-2 logprobs and ``timings``) over a deterministic toy "model": a character vocab
whose next token is a hash of the model file's name and the last tokens. With ``-md`` and ``--spec-type`` it drafts
as a speculative server does and keeps the target's tokens, so greedy output is the same with and without the
drafter; the drafter disagrees with the target at a rate set by ``STAND_IN_DRAFT_MISS`` (default 0.3). Its timings
are a function of the counts, so every ratio the perf gate judges is the same on every run (no timing noise).
"""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve()


def write_launcher(directory: Path) -> Path:
    """An executable that runs this file with this test run's Python (the fixture's llama-server execs it)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "stand-in-llama-server"
    path.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(SCRIPT)!r}\nrunpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n")
    path.chmod(0o755)
    return path


def _main() -> None:  # a server in one function: it runs as a script, without the tests' imports
    import hashlib
    import http.server
    import json
    import os
    import signal

    args = sys.argv[1:]

    def option(*names: str, default: str | None = None) -> str | None:
        found = default
        for k, word in enumerate(args):
            if word in names and k + 1 < len(args):
                found = args[k + 1]
        return found

    model = option("-m", "--model") or ""
    drafter = option("-md", "--model-draft")
    speculative = drafter is not None and option("--spec-type") not in (None, "none")
    draft_max = int(option("--spec-draft-n-max", "--draft-max", default="16") or 16)
    miss = float(os.environ.get("STAND_IN_DRAFT_MISS", "0.3"))
    port = int(option("--port", default="8080") or 8080)
    seed = hashlib.sha256(Path(model).name.encode()).digest()[:8]
    first, count = 32, 95  # printable ASCII

    def h(*parts: object) -> int:
        return int.from_bytes(hashlib.sha256(seed + repr(parts).encode()).digest()[:8], "big")

    def target_next(ctx: list[int]) -> int:
        return first + h("t", tuple(ctx[-6:])) % count

    def drafter_next(ctx: list[int]) -> int:
        right = target_next(ctx)
        if h("d", tuple(ctx[-6:])) % 1000 < miss * 1000:
            return first + (right - first + 1 + h("w", len(ctx)) % (count - 1)) % count
        return right

    def tokenize(prompt: object) -> list[int]:
        parts = prompt if isinstance(prompt, list) else [prompt]
        ids: list[int] = []
        for part in parts:
            if isinstance(part, int):
                ids.append(part)
            else:
                ids += [first + (ord(c) - first) % count if ord(c) >= first else first for c in str(part)]
        return ids

    def completion(body: dict[str, object]) -> dict[str, object]:
        ctx = tokenize(body.get("prompt", ""))
        n_predict = int(str(body.get("n_predict", 16)))
        prompt_n = len(ctx)
        out: list[int] = []
        drafted = accepted = steps = 0
        while len(out) < n_predict:
            steps += 1
            if speculative:
                draft: list[int] = []
                for _ in range(draft_max):
                    draft.append(drafter_next(ctx + out + draft))
                drafted += len(draft)
                for d in draft:  # the target verifies: keep the agreeing prefix, then its own token
                    if len(out) >= n_predict or d != target_next(ctx + out):
                        break
                    out.append(d)
                    accepted += 1
            if len(out) < n_predict:
                out.append(target_next(ctx + out))
        probs = [
            {"id": t, "token": chr(t), "logprob": -0.05, "top_logprobs": [{"id": t, "token": chr(t), "logprob": -0.05},
                                                                          {"id": first + (t - first + 1) % count, "token": chr(first + (t - first + 1) % count), "logprob": -3.5}]}
            for t in out
        ]  # fmt: skip
        timings: dict[str, object] = {"prompt_n": prompt_n, "prompt_ms": 0.5 + 0.05 * prompt_n, "predicted_n": len(out),
                                      "predicted_ms": 2.0 * steps + 0.25 * drafted}  # fmt: skip
        if speculative:
            timings |= {"draft_n": drafted, "draft_n_accepted": accepted}
        reply: dict[str, object] = {"content": "".join(chr(t) for t in out), "tokens": out, "stop_type": "limit", "timings": timings}
        if body.get("n_probs"):
            reply["completion_probabilities"] = probs
        return reply

    class Handler(http.server.BaseHTTPRequestHandler):
        def send(self, code: int, doc: object) -> None:
            data = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self.send(200, {"status": "ok"})
            elif self.path == "/props":
                self.send(200, {"model_path": model, "stand_in": True})
            else:
                self.send(404, {"error": self.path})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            if self.path == "/tokenize":
                self.send(200, {"tokens": tokenize(body.get("content", ""))})
            elif self.path == "/completion":
                self.send(200, completion(body))
            else:
                self.send(404, {"error": self.path})

        def log_message(self, *_args: object) -> None:
            pass

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"stand-in llama-server: {model} on port {port}" + (f", drafting with {drafter} ({draft_max} a step)" if speculative else ""), flush=True)
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    _main()
