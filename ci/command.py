"""One way to run an external program (after nox's ``command.run``).

Every program goes through :func:`run`: an argv list, never a string or ``shell=True``; the program is resolved
before it starts; the quoted command line is logged; a failure raises :class:`CommandFailed` with the tail.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ci.errors import CommandFailed, ToolchainError

log = logging.getLogger("onebit-ci")

TAIL_LINES = 40


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    output: str
    timed_out: bool = False


def resolve(program: str | os.PathLike[str], path: str | None = None) -> str:
    """Absolute path of ``program``; a :class:`ToolchainError` naming it when it is not there."""
    name = os.fspath(program)
    if os.sep in name:
        if os.access(name, os.X_OK) and Path(name).is_file():
            return os.path.abspath(name)  # not resolve(): a venv's python is a symlink out of the venv
        raise ToolchainError(f"{name}: not an executable file")
    found = shutil.which(name, path=path)
    if found is None:
        raise ToolchainError(f"{name}: not found on PATH; install it or put it on PATH")
    return found


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    check: bool = True,
    quiet: bool = False,
    log_file: IO[str] | None = None,
    on_line: Callable[[str], None] | None = None,
    what: str | None = None,
    stdin: Path | None = None,
) -> Completed:
    """Run ``argv`` to completion and return its combined output.

    ``log_file`` receives every line as it comes; ``on_line`` is called per line (progress display).
    ``env`` replaces the environment when given; ``stdin`` is a file the program reads. A timeout kills the process
    and, with ``check``, raises.
    Ctrl-C is passed to the child (same process group) and re-raised once it has exited.
    """
    args = [os.fspath(a) for a in argv]
    search = env.get("PATH") if env is not None else None
    args[0] = resolve(args[0], search)
    display = shlex.join([os.fspath(argv[0]), *args[1:]])
    if not quiet:
        log.info("$ %s", display)
    source = stdin.open("rb") if stdin is not None else None
    try:
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=source if source is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
        )
    finally:
        if source is not None:
            source.close()
    lines: list[str] = []
    tail: deque[str] = deque(maxlen=TAIL_LINES)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            tail.append(line)
            if log_file is not None:
                log_file.write(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            proc.wait()
    except BaseException:
        # Ctrl-C reaches the child too; give it a moment, then make sure it is gone before re-raising.
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
        _close_output(proc, reader)
        raise
    reader.join(timeout=5)
    _close_output(proc, reader)
    done = Completed(tuple(args), proc.returncode, "".join(lines), timed_out)
    if check and (timed_out or proc.returncode != 0):
        raise CommandFailed(args, proc.returncode, "".join(tail), what=what or os.fspath(argv[0]))
    return done


def _close_output(proc: subprocess.Popen[str], reader: threading.Thread) -> None:
    # Popen leaves its pipe open without a with-block: an unclosed file is a ResourceWarning, an error under pytest's
    # filterwarnings. A reader still blocked on it (a grandchild holding the pipe) keeps it.
    if proc.stdout is not None and not reader.is_alive():
        proc.stdout.close()


def output_of(argv: Sequence[str | os.PathLike[str]], **kwargs: object) -> str:
    """Stdout and stderr of a quick command that must succeed (a version query, ``hipconfig``)."""
    return run(argv, quiet=True, **kwargs).output  # type: ignore[arg-type]
