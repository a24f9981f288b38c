"""``python -m ci backend-ops``: the test-backend-ops gate on its own, on a binary or a saved log, outside a build
(JSON and JUnit, no ledger); inside the project, the pin's expectations."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ci.commands import a_folder, given, job_of, say
from ci.commands.job import Job
from ci.errors import ConfigError
from ci.gates.backend_ops import run as backend_ops
from ci.gates.backend_ops import spec as bo_spec
from ci.gates.backend_ops.output import OP_RE
from ci.release import records

# Messages, shared with the tests that match on them (tests/support/messages.py)
BAD_EXPECT = '--expect "{value}": not OP=N with N cases, 1 or more (e.g. --expect GATED_DELTA_NET=54)'
EXPECT_TWICE = "--expect {op}: given twice"
SQL_WITHOUT_LOG = "--from-sql FILE goes with --from-log FILE (a run makes its own sql output)"
BINARY_AND_LOG = "--binary and --from-log: give one (--from-log judges a saved log and runs nothing)"
OUTSIDE_THE_PROJECT = "{reason}; outside the project give {flags}"
NO_PINNED_EXPECTATIONS = "pins.yaml: expect.backend_ops: no expectations; add them there or give --expect OP=N"
BINARY_REQUIRED = "--binary PATH is required (the build's test-backend-ops), unless --from-log FILE judges a saved log"
NOT_EXECUTABLE = "--binary {binary}: not an executable file; give the build's test-backend-ops"


@dataclass(frozen=True)
class BackendOpsRequest:
    device: str
    binary: Path | None = None
    expect: tuple[str, ...] = ()  # OP=N
    from_log: Path | None = None
    from_sql: Path | None = None
    pinned_commit: str | None = None  # None: the pin's; "none": no check
    patched: bool = False
    dirty: str | None = None
    build_key: str = ""
    timeout: float = backend_ops.DEFAULT_TIMEOUT
    out: Path | None = None


def expectations(values: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        op, sep, count = value.partition("=")
        if not sep or not OP_RE.match(op) or not count.isdigit() or int(count) < 1:
            raise ConfigError(BAD_EXPECT.format(value=value))
        if op in out:
            raise ConfigError(EXPECT_TWICE.format(op=op))
        out[op] = int(count)
    return out


def backend_ops_session(find: Callable[[], Job], request: BackendOpsRequest, say: Callable[[str], None]) -> int:
    """``python -m ci backend-ops``: the gate on a binary or a saved log; the pin's expectations inside the project."""
    if request.from_sql and not request.from_log:
        raise ConfigError(SQL_WITHOUT_LOG)
    if request.from_log and request.binary:
        raise ConfigError(BINARY_AND_LOG)
    expected = expectations(request.expect)
    source = bo_spec.EXPECTED_BY_FLAG if expected else bo_spec.EXPECTED_IN_PINS  # which the count message names
    pinned = None if request.pinned_commit == "none" else request.pinned_commit
    root: Path | None = None
    if not expected or request.pinned_commit is None:
        try:
            job = find()
            pins = job.pins
        except ConfigError as exc:
            flags = " and ".join(f for f, missing in (("--expect OP=N", not expected), ("--pinned-commit SHA|none", request.pinned_commit is None)) if missing)
            raise ConfigError(OUTSIDE_THE_PROJECT.format(reason=exc.message, flags=flags)) from None
        root = job.root
        expected = expected or pins.expected_cases()
        if not expected:
            raise ConfigError(NO_PINNED_EXPECTATIONS)
        if request.pinned_commit is None:
            pinned = pins.fork.commit
    if request.timeout <= 0:
        raise ConfigError(backend_ops.BAD_TIMEOUT.format(timeout=request.timeout))
    dirty = backend_ops.DirtyRule(request.dirty) if request.dirty else None
    out = a_folder(request.out or (root or Path.cwd()) / "build" / "gates", "--out", "the gate's JSON, JUnit and logs")
    if request.from_log:
        result = backend_ops.judge_log(request.from_log, request.device, expected, pinned, request.patched, request.build_key, dirty=dirty, sql_path=request.from_sql, expected_from=source)
    else:
        if request.binary is None:
            raise ConfigError(BINARY_REQUIRED)
        if not request.binary.is_file() or not os.access(request.binary, os.X_OK):
            raise ConfigError(NOT_EXECUTABLE.format(binary=request.binary))
        result = backend_ops.run_gate(
            request.binary, request.device, expected, pinned, request.patched, request.timeout, out / "backend_ops-logs", request.build_key, dirty=dirty, expected_from=source
        )
    return records.one_gate(result, out, say)


def main(args: argparse.Namespace) -> int:
    request = BackendOpsRequest(
        args.device, given(args.binary), tuple(args.expect), given(args.from_log), given(args.from_sql), args.pinned_commit,
        args.patched, args.dirty, args.build_key, args.timeout, given(args.out),
    )  # fmt: skip
    return backend_ops_session(lambda: job_of(args), request, say)
