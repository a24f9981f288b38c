"""The test-backend-ops gate: plan the runs (one per op on the console, then one ``--output sql`` run of every op),
run them, keep every output, and judge them (:mod:`ci.gates.backend_ops.judge`; what test-backend-ops prints is
parsed in :mod:`ci.gates.backend_ops.output`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ci import command, defaults
from ci.errors import ConfigError
from ci.gates.backend_ops.judge import GATE, judge
from ci.gates.backend_ops.output import parse_console, parse_sql
from ci.gates.backend_ops.spec import EXPECTED_IN_PINS, ConsoleRun, DirtyRule, GateSpec, Outcome, SqlRun, check_device, check_ops
from ci.gates.results import GateResult
from serve.bounded import LOG_LIMIT, read_regular

__all__ = ["DEFAULT_TIMEOUT", "GATE", "DirtyRule", "GateSpec", "judge", "judge_log", "plan", "run_gate"]

DEFAULT_TIMEOUT = defaults.TIMEOUT

# Messages, shared with the tests that match on them (tests/support/messages.py)
BAD_TIMEOUT = "--timeout {timeout:g}: must be more than 0 seconds"
LOG_NOT_FOUND = "{flag} {path}: not found; give a saved test-backend-ops output"
LOG_UNREADABLE = "{flag} {path}: cannot be read: {reason}; give a saved test-backend-ops output"
CONSOLE_UNFINISHED = "not made: a console run did not finish"
SAVED_LOG = "not made: judged from a saved console log"


# -- the plan -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One run of test-backend-ops: one op on the console, or every op at once with ``--output sql``."""

    argv: tuple[str, ...]
    log_name: str
    op: str | None  # None: the sql cross-check

    @property
    def is_sql(self) -> bool:
        return self.op is None


@dataclass(frozen=True)
class BackendOpsPlan:
    device: str
    ops: tuple[str, ...]
    steps: tuple[Step, ...]

    @property
    def console_steps(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if not s.is_sql)

    @property
    def sql_step(self) -> Step:
        return next(s for s in self.steps if s.is_sql)


def _file_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def plan(binary: str | os.PathLike[str], device: str, ops: Sequence[str]) -> BackendOpsPlan:
    """``test -o OP -b DEVICE`` per op (each its own log, so a crash in one op does not hide the others), then one
    ``--output sql`` run of every op for the cross-check. Pure: nothing runs.
    """
    device = check_device(device)
    the_ops = check_ops(ops)
    exe = os.fspath(binary)
    steps = [Step((exe, "test", "-o", op, "-b", device), f"test-backend-ops.{_file_part(device)}.{_file_part(op)}.log", op) for op in the_ops]
    steps.append(Step((exe, "test", "-o", ",".join(the_ops), "-b", device, "--output", "sql"), f"test-backend-ops.{_file_part(device)}.sql", None))
    return BackendOpsPlan(device=device, ops=the_ops, steps=tuple(steps))


# -- running it -----------------------------------------------------------------------------------------------


def _execute(step: Step, timeout: float, log_dir: Path) -> tuple[command.Completed, Outcome, Path]:
    log_path = log_dir / step.log_name
    start = time.monotonic()
    with command.open_log(log_path) as log_file:  # never through a link planted at its name
        done = command.run(step.argv, timeout=timeout, check=False, log_file=log_file, what="test-backend-ops")
    if done.cut:  # memory kept its last lines only: the whole output is in its log
        done = dataclasses.replace(done, output=_read(log_path, "the log"))
    outcome = Outcome(returncode=done.returncode, timed_out=done.timed_out, timeout=timeout, seconds=time.monotonic() - start)
    return done, outcome, log_path


def run_gate(
    binary: str | os.PathLike[str],
    device: str,
    expected: Mapping[str, int],
    pinned_commit: str | None,
    patched: bool,
    timeout: float,
    log_dir: Path,
    build_key: str = "",
    *,
    dirty: DirtyRule | None = None,
    expected_from: str = EXPECTED_IN_PINS,
) -> GateResult:
    """Run the plan through :func:`ci.command.run`, keep every output under ``log_dir``, judge.

    The sql cross-check is skipped (and the verdict says so) when a console run was killed: it would only wait for
    the same timeout or crash again.
    """
    if timeout <= 0:
        raise ConfigError(BAD_TIMEOUT.format(timeout=timeout))
    spec = GateSpec.make(device, expected, pinned_commit, patched, build_key, dirty, expected_from=expected_from)
    run_plan = plan(binary, spec.device, [op for op, _ in spec.expected])
    log_dir.mkdir(parents=True, exist_ok=True)
    runs: list[ConsoleRun] = []
    for step in run_plan.console_steps:
        done, outcome, log_path = _execute(step, timeout, log_dir)
        runs.append(ConsoleRun(parse_console(done.output), outcome, step.op, str(log_path)))
    if any(r.outcome.killed for r in runs):
        return judge(spec, runs, None, sql_not_made=CONSOLE_UNFINISHED)
    done, outcome, log_path = _execute(run_plan.sql_step, timeout, log_dir)
    return judge(spec, runs, SqlRun(parse_sql(done.output), outcome, str(log_path)))


def _read(path: Path, what: str) -> str:
    try:
        return read_regular(path, LOG_LIMIT).decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise ConfigError(LOG_NOT_FOUND.format(flag=what, path=path)) from None
    except OSError as exc:
        raise ConfigError(LOG_UNREADABLE.format(flag=what, path=path, reason=exc.strerror)) from None


def judge_log(
    path: Path,
    device: str,
    expected: Mapping[str, int],
    pinned_commit: str | None = None,
    patched: bool = False,
    build_key: str = "",
    *,
    dirty: DirtyRule | None = None,
    sql_path: Path | None = None,
    expected_from: str = EXPECTED_IN_PINS,
) -> GateResult:
    """Judge a saved console log (a GPU box's, or a test's), running nothing.

    A console log carries no exit status and no build_commit: without ``sql_path`` the cross-check is not made and
    the verdict says so in its properties.
    """
    spec = GateSpec.make(device, expected, pinned_commit, patched, build_key, dirty, expected_from=expected_from)
    run = ConsoleRun(parse_console(_read(path, "--from-log")), Outcome(), None, str(path))
    if sql_path is None:
        return judge(spec, [run], None, sql_not_made=SAVED_LOG)
    sql = SqlRun(parse_sql(_read(sql_path, "--from-sql")), Outcome(), str(sql_path))
    return judge(spec, [run], sql)
