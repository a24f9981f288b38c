"""A llama-server as a context manager: started through the serve launcher on 127.0.0.1, always stopped and reaped.

:func:`launcher_argv` is the plan (pure). :class:`LlamaServer` runs it in a session of its own and tracks its process
tree (llama-server has a process group of its own); on leaving the block the launcher gets SIGTERM, what is left
after a grace period SIGKILL.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import psutil
import requests

from ci import defaults, loaded
from ci.command import open_log, resolve
from ci.environment import environment
from ci.errors import ServerFailed, describe_returncode
from ci.gates.serving.launcher import process_bytecode, safe_path, with_bytecode
from ci.processes import Process, adopt_orphans, descendants, signals_held, tree_marked, wait_gone
from ci.schema import parse_json

log = logging.getLogger("onebit-ci")

LOCALHOST = "127.0.0.1"
# after the interpreter: ``python [-P] -m serve serve ARGS``, the working directory left off sys.path (safe_path)
LAUNCHER = (*safe_path(), "-m", "serve", "serve")
LOG_TAIL_LINES = 25
BODY_LIMIT = 2000

# Messages, shared with the tests that match on them (tests/support/messages.py)
EXITED_EARLY = "{leg} server exited with {code} before it was healthy"
NOT_HEALTHY = "{leg} server not healthy on {url} after {seconds:g} s"
LLAMA_SERVER_GONE = "its llama-server is gone"
PORT_HELD = "{leg} server exited ({why}), yet port {port} answered /health: another server holds port {port}"
DIED = "{leg} server died ({why}) on port {port}"
ANOTHER_SERVER = "port {port} is answered by another server: its /props names {named}, not {model} that the {leg} server was started with"
NO_ANSWER = "{leg} server: POST {path} got no answer in {seconds:g} s"
DIED_DURING = "{leg} server died during POST {path}: {code}"
HTTP_ERROR = "{leg} server: POST {path}: HTTP {status}: {body}"
BAD_ANSWER = "{leg} server: POST {path}: the answer is {why}: {content!r}"
NOT_AN_OBJECT = "{leg} server: POST {path}: the answer is not a JSON object"
HUNG = "{leg} server stopped making progress during POST {path}: {how} for {seconds:g} s (a slow server answers between its steps)"
NO_SLOTS_ANSWER = "its /slots gave no answer"  # HUNG's how: the main loop took no task
SLOTS_STILL = "its /slots said the same while it was processing"  # HUNG's how: the loop ran, its work did not advance

# A request outstanding is watched through the server's own /slots, answered by its main loop between two steps of its
# work: no answer (a loop that never comes back), or the same slots while one is processing, for HUNG_AFTER seconds is
# a server that stopped. A hung drafter server had cost the self-test 120 s a leg (387 s against 80 s a fault).
WATCH_EVERY = 1.0  # seconds between two looks
ANSWER_WITHIN = 5.0  # seconds a look waits for /slots
BUSY_CPU = 0.5  # CPU seconds spent since the last look that make an unanswered look a step of work, not a hang
HUNG_AFTER = 15.0  # seconds without progress: a GPU step (a 27B prompt batch, a shader built on first use) takes a few


@dataclass(frozen=True)
class ServerLaunch:
    """One server to start: its argv (the launcher's), the variables it adds to the environment, where it listens."""

    name: str  # names the server in messages and its log file: "baseline", "drafter"
    argv: tuple[str, ...]
    host: str
    port: int
    env: tuple[tuple[str, str], ...] = ()
    model: str = ""  # the model it was given: its /props must name it, or another server answers the port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def display(self) -> str:
        return shlex.join(self.argv)


def launcher_argv(
    *,
    model: Path,
    llama_server: Path,
    port: int,
    device: str = "cpu",
    host: str = LOCALHOST,
    context: int = defaults.CONTEXT,
    serve_options: Sequence[str] = (),
    extra: Sequence[str] = (),
    python: str = sys.executable,
) -> tuple[str, ...]:
    """The serve launcher's command line for one server (issue 5's CLI): ``python -m serve serve ... -- EXTRA``."""
    argv = [python, *LAUNCHER, "-m", str(model), "--device", device, "--llama-server", str(llama_server)]
    argv += ["--host", host, "--port", str(port), "-c", str(context), *serve_options]
    if extra:
        argv += ["--", *extra]
    return tuple(argv)


def default_server(launch: ServerLaunch, log_path: Path, health_timeout: float) -> LlamaServer:
    return LlamaServer(launch, log_path, health_timeout=health_timeout)


def free_ports(count: int, host: str = LOCALHOST) -> tuple[int, ...]:
    """``count`` distinct ports the kernel has just handed out on ``host`` (held together, so they differ)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind((host, 0))
            ports.append(s.getsockname()[1])
        return tuple(ports)


class LlamaServer:
    """A running server; use it as ``with LlamaServer(launch, log_path) as server: server.completion({...})``."""

    def __init__(
        self,
        launch: ServerLaunch,
        log_path: Path,
        *,
        health_timeout: float = 60.0,
        stop_grace: float = 10.0,
        cwd: Path | None = None,
    ) -> None:
        self.launch = launch
        self.log_path = log_path
        self.health_timeout = health_timeout
        self.stop_grace = stop_grace
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._http = requests.Session()
        self.returncode: int | None = None
        self.seconds_to_healthy = 0.0
        self._tree: set[Process] = set()
        self._terminated = 0.0  # when SIGTERM was sent

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def __enter__(self) -> LlamaServer:
        try:  # the start too: a Ctrl-C as it returns would leave the server, in a session of its own, running
            self.start()
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def started(self) -> bool:
        return self._proc is not None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError(f"{self.launch.name} server was never started")
        return self._proc.pid

    @property
    def url(self) -> str:
        return self.launch.url

    def start(self) -> None:
        argv = list(self.launch.argv)
        argv[0] = resolve(argv[0])
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open_log(self.log_path, binary=True)  # never through a link planted there; closed in stop()
        log.info("$ %s", self.launch.display())
        self._started = time.monotonic()
        # the launcher runs its source, not bytecode left in serve/__pycache__ (launcher_files.process_bytecode), in the
        # one environment of what a gate starts (ci.environment.environment), marked: its tree's orphans come back here
        env = tree_marked(with_bytecode(environment(given=self.launch.env), process_bytecode()))
        adopt_orphans()
        with signals_held():  # a Ctrl-C as it starts is raised once the server is known here, so stop() ends it
            self._proc = subprocess.Popen(
                argv,
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the launcher and llama-server are stopped together
            )
        loaded.follow(self._proc.pid)  # the libraries its llama-server maps, while a gate watches (ci.loaded)

    def wait_healthy(self) -> None:
        """Poll /health until it answers 200; :class:`ServerFailed` with the log's tail if it dies or times out."""
        deadline = self._started + self.health_timeout
        while True:
            code = self.poll()
            if code is not None:
                raise ServerFailed(EXITED_EARLY.format(leg=self.launch.name, code=describe_returncode(code)), self.log_tail())
            try:
                r = self._http.get(f"{self.url}/health", timeout=2)
                if r.status_code == 200:
                    self._track()
                    self.check_own(answered=True)
                    self.seconds_to_healthy = time.monotonic() - self._started
                    log.info("%s server healthy on %s after %.2f s", self.launch.name, self.url, self.seconds_to_healthy)
                    return
            except requests.RequestException:
                pass
            if time.monotonic() >= deadline:
                raise ServerFailed(NOT_HEALTHY.format(leg=self.launch.name, url=self.url, seconds=self.health_timeout), self.log_tail())
            time.sleep(0.01)

    def check_own(self, answered: bool = False) -> None:
        """That the server answering the port is the one started here: the launcher and its llama-server alive, and
        ``/props`` naming the model it was given. Another process on the port is a :class:`ServerFailed` naming it;
        ``answered``: something just answered /health on the port."""
        port = self.launch.port
        code = self.poll()
        if code is None and self._tree and not any(p.alive() for p in self._tree):
            code = -1
        if code is not None:
            why = describe_returncode(code) if code >= 0 else LLAMA_SERVER_GONE
            if answered:
                raise ServerFailed(PORT_HELD.format(leg=self.launch.name, why=why, port=port), self.log_tail())
            raise ServerFailed(DIED.format(leg=self.launch.name, why=why, port=port), self.log_tail())
        if not self.launch.model:
            return
        try:
            r = self._http.get(f"{self.url}/props", timeout=10)
            props = parse_json(r.content) if r.status_code == 200 else {}
        except (requests.RequestException, ValueError, RecursionError):
            props = {}
        named = props.get("model_path") if isinstance(props, dict) else None
        if isinstance(named, str) and named and Path(named).resolve() != Path(self.launch.model).resolve():
            raise ServerFailed(ANOTHER_SERVER.format(port=port, named=named, model=self.launch.model, leg=self.launch.name), self.log_tail())

    def poll(self) -> int | None:
        if self._proc is None:
            return None
        return self._proc.poll()

    def terminate(self) -> None:
        """SIGTERM to the launcher (it forwards it to llama-server) without waiting: :meth:`stop` waits and reaps.
        Stopping several servers is quicker as terminate-all, then stop each (llama-server takes 0.12 s to exit)."""
        proc = self._proc
        if proc is None or proc.returncode is not None or self._terminated:
            return
        self._track()
        self._terminated = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)

    def stop(self) -> int | None:
        """SIGTERM to the launcher, SIGKILL to what is left after ``stop_grace`` s, reap; safe to call twice."""
        proc = self._proc
        if proc is None:
            if self._log is not None:  # it failed to start
                self._log.close()
                self._log = None
            return self.returncode
        try:
            self._track()
            if proc.returncode is None:
                self.terminate()
                if not _exited(proc.pid, max(0.0, self._terminated + self.stop_grace - time.monotonic())):
                    log.warning("%s server still running %g s after SIGTERM; killing it", self.launch.name, self.stop_grace)
            self._track()
            # The launcher is waited for but not yet reaped, so its pid cannot be reused while its group and the
            # tree seen so far get SIGKILL: a llama-server whose launcher did not stop it goes too.
            _signal_group(proc.pid, signal.SIGKILL)
            for p in self.leftovers():
                p.kill()
            proc.wait()
            wait_gone(self._tree, 5.0)
        finally:
            if proc.poll() is None:  # interrupted while waiting: never leave it running
                _signal_group(proc.pid, signal.SIGKILL)
                for p in self.leftovers():
                    p.kill()
                proc.wait()
            self.returncode = proc.returncode
            self._http.close()
            if self._log is not None:
                self._log.close()
                self._log = None
        return self.returncode

    def _track(self) -> None:
        """Remember the launcher's descendants now (llama-server); an orphan is no longer found through its parent."""
        if self._proc is not None:
            self._tree |= set(descendants(self._proc.pid))

    def processes(self) -> tuple[Process, ...]:
        """The server's live descendants now (llama-server under the launcher)."""
        return descendants(self.pid) if self._proc is not None and self._proc.returncode is None else ()

    def leftovers(self) -> tuple[Process, ...]:
        """Processes of this server seen so far that are still alive (not zombies): what must be empty after stop."""
        return tuple(sorted((p for p in self._tree if p.alive()), key=lambda p: p.pid))

    # -- requests -----------------------------------------------------------------------------------------------

    def completion(self, body: Mapping[str, Any], timeout: float = 300.0) -> dict[str, Any]:
        """POST /completion; an HTTP error, a timeout or a dead server raise :class:`ServerFailed` with the evidence."""
        return self.post("/completion", body, timeout)

    def post(self, path: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        try:
            r = self._watched(path, body, timeout)
        except requests.Timeout:
            raise ServerFailed(NO_ANSWER.format(leg=self.launch.name, path=path, seconds=timeout), self.log_tail()) from None
        except requests.ConnectionError as exc:
            code = self._wait_exit(2.0)
            if code is not None:
                raise ServerFailed(DIED_DURING.format(leg=self.launch.name, path=path, code=describe_returncode(code)), self.log_tail()) from None
            raise ServerFailed(f"{self.launch.name} server: POST {path}: {exc}", self.log_tail()) from None
        if r.status_code != 200:
            text = r.text.strip()
            if len(text) > BODY_LIMIT:
                text = text[:BODY_LIMIT] + " [...]"
            raise ServerFailed(HTTP_ERROR.format(leg=self.launch.name, path=path, status=r.status_code, body=text), self.log_tail())
        try:
            answer = parse_json(r.content)
        except (ValueError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc) if "twice" in str(exc) else "not JSON"
            raise ServerFailed(BAD_ANSWER.format(leg=self.launch.name, path=path, why=why, content=r.content[:200]), self.log_tail()) from None
        if not isinstance(answer, dict):
            raise ServerFailed(NOT_AN_OBJECT.format(leg=self.launch.name, path=path), self.log_tail())
        return answer

    def _watched(self, path: str, body: Mapping[str, Any], timeout: float) -> requests.Response:
        """POST ``body`` to ``path`` while its progress is watched (:data:`HUNG_AFTER`); the response, or the
        request's own exception. A server without /slots is waited for until ``timeout``, as before."""
        done: list[requests.Response | BaseException] = []
        answered = threading.Event()

        def ask() -> None:
            try:
                done.append(self._http.post(f"{self.url}{path}", json=dict(body), timeout=timeout))
            except BaseException as exc:  # handed to the caller's thread
                done.append(exc)
            finally:
                answered.set()

        threading.Thread(target=ask, daemon=True, name=f"onebit-post-{self.launch.name}").start()
        watch: requests.Session | None = None
        try:
            last, since, spent = None, time.monotonic(), 0.0
            while not answered.wait(WATCH_EVERY):
                if watch is None:  # it outlasted one look: watched from here (most answer sooner, and cost nothing)
                    watch, spent = requests.Session(), self._cpu_seconds()
                state = _slots(watch, self.url)
                if state == UNSUPPORTED:
                    answered.wait()
                    break
                # no answer while its processes spend CPU time: one long step of work (a 27B-wide micro-batch on two
                # CPU cores outlasts HUNG_AFTER), not a loop that never comes back
                working = state is None and (now := self._cpu_seconds()) - spent >= BUSY_CPU
                if working:
                    spent = now
                if working or state != last or (state is not None and not any(busy for _, busy, _ in state)):
                    last, since = state, time.monotonic()
                elif time.monotonic() - since >= HUNG_AFTER and not answered.is_set():
                    how = NO_SLOTS_ANSWER if state is None else SLOTS_STILL
                    raise ServerFailed(HUNG.format(leg=self.launch.name, path=path, how=how, seconds=HUNG_AFTER), self.log_tail())
        finally:
            if watch is not None:
                watch.close()
        outcome = done[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _cpu_seconds(self) -> float:
        """The CPU time its processes (the launcher and llama-server) have spent so far."""
        total = 0.0
        if self._proc is None:
            return total
        for pid in (self._proc.pid, *(p.pid for p in self.processes())):
            with contextlib.suppress(psutil.Error):
                times = psutil.Process(pid).cpu_times()
                total += times.user + times.system
        return total

    def _wait_exit(self, seconds: float) -> int | None:
        if self._proc is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self._proc.wait(timeout=seconds)
        return None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if self._log is not None:
            self._log.flush()
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return "".join(deque(fh, maxlen=lines))
        except FileNotFoundError:
            return ""


# what the gates and the bench start their servers with; tests pass one that records or breaks the servers
ServerFactory = Callable[[ServerLaunch, Path, float], LlamaServer]


UNSUPPORTED = ()  # what _slots says of a server without the endpoint (a stand-in, or --no-slots)
SlotsState = tuple[tuple[int, bool, int], ...]


def _slots(http: requests.Session, url: str) -> SlotsState | None:
    """Each slot's id, whether it is processing and the tokens it has decoded, from /slots; None when no answer came in
    :data:`ANSWER_WITHIN` seconds; :data:`UNSUPPORTED` when the server has no such endpoint."""
    try:
        r = http.get(f"{url}/slots", timeout=ANSWER_WITHIN)
    except requests.RequestException:
        return None
    if r.status_code != 200:
        return UNSUPPORTED
    try:
        data = parse_json(r.content)
    except (ValueError, RecursionError):
        return UNSUPPORTED
    if not isinstance(data, list):
        return UNSUPPORTED
    state: list[tuple[int, bool, int]] = []
    for slot in data:
        if not isinstance(slot, dict):
            return UNSUPPORTED
        nxt = slot.get("next_token")
        nxt = nxt[0] if isinstance(nxt, list) and nxt else nxt
        decoded = nxt.get("n_decoded", 0) if isinstance(nxt, dict) else 0
        state.append((int(slot.get("id", len(state))), bool(slot.get("is_processing")), int(decoded) if isinstance(decoded, int) else 0))
    return tuple(state) or UNSUPPORTED


def _exited(pid: int, seconds: float) -> bool:
    """Whether child ``pid`` exits within ``seconds``; it is left unreaped (a zombie) so its pid stays taken."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # already reaped
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_members(pgid: int) -> tuple[int, ...]:
    """Live (not zombie) processes of process group ``pgid``."""
    out = []
    for p in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                out.append(p.pid)
    return tuple(sorted(out))


