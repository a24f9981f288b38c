"""The oracle gate, planned and run: compile the driver (``driver.c``) against the build's ggml headers and link it
with the build's own libraries, once per build; then, for each case, write its inputs, run the driver on the device
through :func:`ci.command.run`, read the op's result back and judge it against the float64 reference
(:mod:`ci.gates.oracle.judge`).

Plan apart from run: :func:`plan_driver`, :func:`encode` and :func:`split` are pure but for reading the files they
name; :func:`compile_driver`, :func:`run_case` and :func:`run_gate` run programs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ci import command
from ci.errors import CommandFailed, ToolchainError
from ci.files import sha256_cached, sha256_file
from ci.gates.oracle import cases as oracle_cases
from ci.gates.oracle import timing
from ci.gates.oracle.cases import Case, Inputs, draw
from ci.gates.oracle.judge import GATE, Floors, Measured, Outcome, Score, judge, judge_case
from ci.gates.oracle.reference import gated_delta_net
from ci.gates.oracle.wire import CFLAGS, compile_argv, encode, library, split
from ci.gates.results import CaseResult, GateResult, Status, case_counts

__all__ = ["CaseRun", "DriverBuild", "compile_driver", "encode", "plan_driver", "run_case", "run_cases", "run_gate", "split"]

SOURCE = Path(__file__).with_name("driver.c")
HEADERS = ("ggml.h", "ggml-backend.h", "ggml-alloc.h")  # what driver.c includes
LIBRARIES = ("ggml", "ggml-base")  # what it links; the backends come through libggml, or are loaded from the same folder
EXECUTABLE = "oracle-driver"
TIMEOUT = 300.0  # seconds per case; the engine's case took about a second on 2 CPU cores
UNSUPPORTED_EXIT = 5  # driver.c's EXIT_UNSUPPORTED
_CASE_MS = re.compile(r"^case_ms: (\S+) ([0-9.]+)$", re.MULTILINE)
_SAMPLE_MS = re.compile(r"^sample_ms: (\S+) ([0-9.]+)$", re.MULTILINE)

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_LIBRARY = "{folder}: no lib{name}.so: the oracle gate links the build's shared ggml libraries (a build with BUILD_SHARED_LIBS=OFF has none)"
NO_HEADER_NEXT = "; the checkout holds none (emptied?): nox -s patches puts it back at the pin + series, then run the gates again"
NO_HEADER = "{folder}: no {name}: the oracle gate compiles its driver against the build's own ggml headers" + NO_HEADER_NEXT
DRIVER_EXITED = "exit {code}: {tail}"
DRIVER_TIMED_OUT = "no result in {timeout:g} s"
COMPILE_FAILED = "the oracle driver did not compile against {include}: {tail}"


# -- the driver, compiled per build -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DriverBuild:
    """The driver compiled for one build: the build's headers and libraries, the compiler, and the folder the key
    names (a changed driver, header, library or compiler is another key, so another folder)."""

    source: Path
    include_dir: Path
    lib_dir: Path
    libraries: tuple[Path, ...]
    compiler: str
    key: str
    folder: Path

    @property
    def executable(self) -> Path:
        return self.folder / EXECUTABLE

    def argv(self, output: Path) -> tuple[str, ...]:
        return compile_argv(self.compiler, self.include_dir, self.source, output, self.libraries, self.lib_dir)


def _library(folder: Path, name: str) -> Path:
    found = library(folder, name)
    if found is None:
        raise ToolchainError(NO_LIBRARY.format(folder=folder, name=name))
    return found


def plan_driver(lib_dir: Path, include_dir: Path, cache_root: Path, compiler: str = "cc", source: Path = SOURCE) -> DriverBuild:
    """The driver's compile for the build whose shared libraries are in ``lib_dir`` and headers in ``include_dir``,
    into a folder of ``cache_root`` named by the key of all that goes into it."""
    for name in HEADERS:
        if not (include_dir / name).is_file():
            raise ToolchainError(NO_HEADER.format(folder=include_dir, name=name))
    libraries = tuple(_library(lib_dir, name) for name in LIBRARIES)
    resolved = command.resolve(compiler)
    identity = {
        "source": sha256_file(source),
        "headers": {name: sha256_file(include_dir / name) for name in HEADERS},
        "libraries": {p.name: sha256_cached(p) for p in libraries},
        "lib_dir": str(lib_dir.resolve()),  # the rpath the executable carries
        "compiler": [resolved, sha256_cached(Path(resolved))],
        "flags": CFLAGS,
    }
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return DriverBuild(source, include_dir, lib_dir, libraries, resolved, key, cache_root / f"{EXECUTABLE}-{key[:16]}")


def compiler_errors(output: str) -> str:
    """The compiler's error lines, on one line (its last lines when it printed none: a linker's message)."""
    lines = output.strip().splitlines()
    errors = [ln.strip() for ln in lines if "error:" in ln]
    return " | ".join(errors[:3] or lines[-3:])


def compile_driver(build: DriverBuild, timeout: float = 300.0) -> Path:
    """The driver's executable: compiled unless this key's folder has it already (written under another name and
    renamed, so a compile cut short leaves nothing that looks done)."""
    if build.executable.is_file():
        return build.executable
    build.folder.mkdir(parents=True, exist_ok=True)
    partial = build.folder / f".{EXECUTABLE}.{os.getpid()}.tmp"
    try:
        command.run(build.argv(partial), timeout=timeout, what="cc (the oracle driver)")
        os.replace(partial, build.executable)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return build.executable


def default_threads(device: str) -> int:
    """The CPU backend's threads: one per core (its own default is 4, which oversubscribes a 2-core runner); 0 (the
    backend's own choice) for a GPU."""
    return (os.cpu_count() or 1) if device.upper() == "CPU" else 0


def run_case(
    driver: Path,
    device: str,
    case: Case,
    work_dir: Path,
    *,
    lib_dir: Path | None = None,
    threads: int = 0,
    bench: int = 0,
    timeout: float = TIMEOUT,
    keep: bool = False,
    inputs: Inputs | None = None,
) -> Measured:
    """Run one case on ``device`` (its inputs drawn unless given) and read back what the op wrote; the case's files
    are removed unless ``keep``."""
    work_dir.mkdir(parents=True, exist_ok=True)
    given, result = work_dir / f"{case.id}.in", work_dir / f"{case.id}.out"
    given.write_bytes(encode(case.shape, draw(case) if inputs is None else inputs))
    argv: list[str] = [str(driver), "--threads", str(threads)]
    if lib_dir is not None:
        argv += ["--backend-dir", str(lib_dir.resolve())]
    if bench:
        argv += ["--bench-mode", str(bench)]
    argv += [device, case.id, str(given), str(result)]
    try:
        done = command.run(argv, timeout=timeout, check=False, quiet=True, what="the oracle driver")
        if done.timed_out:
            return Measured(case.id, Outcome.FAILED, why=DRIVER_TIMED_OUT.format(timeout=timeout), seconds=done.seconds)
        if done.returncode == UNSUPPORTED_EXIT:
            return Measured(case.id, Outcome.UNSUPPORTED, why=done.output.strip(), seconds=done.seconds)
        if done.returncode != 0:
            tail = " | ".join(done.output.strip().splitlines()[-3:])
            return Measured(case.id, Outcome.FAILED, why=DRIVER_EXITED.format(code=done.returncode, tail=tail), seconds=done.seconds)
        raw = np.fromfile(result, dtype="<f4")
        try:
            output, slots = split(case.shape, raw)
        except ValueError as exc:
            return Measured(case.id, Outcome.FAILED, why=str(exc), seconds=done.seconds)
        timed = {m.group(1): float(m.group(2)) for m in _CASE_MS.finditer(done.output)}
        samples = tuple(float(m.group(2)) for m in _SAMPLE_MS.finditer(done.output) if m.group(1) == case.id)
        return Measured(case.id, Outcome.RAN, output, slots, seconds=done.seconds, case_ms=timed.get(case.id), samples_ms=samples)
    finally:
        if not keep:
            for path in (given, result):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


@dataclass(frozen=True)
class CaseRun:
    """A case as it ran and as it was judged."""

    case: Case
    measured: Measured
    result: CaseResult
    score: Score | None


def run_cases(
    driver: Path,
    device: str,
    floors: Floors,
    work_dir: Path,
    cases: Sequence[Case] = oracle_cases.CASES,
    *,
    lib_dir: Path | None = None,
    threads: int | None = None,
    bench: int = 0,
    timeout: float = TIMEOUT,
) -> list[CaseRun]:
    """Every case run on ``device``, its reference computed here in float64, and judged."""
    runs = []
    for case in cases:
        n = default_threads(device) if threads is None else threads
        x = draw(case)
        measured = run_case(driver, device, case, work_dir, lib_dir=lib_dir, threads=n, bench=bench, timeout=timeout, inputs=x)
        reference = None
        if measured.outcome is Outcome.RAN:
            reference = gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, case.shape.snapshots)
        result, score = judge_case(measured, reference, floors, device, case.group)
        runs.append(CaseRun(case, measured, result, score))
    return runs


def run_gate(
    lib_dir: Path,
    include_dir: Path,
    device: str,
    floors: Floors,
    work_dir: Path,
    cases: Sequence[Case] = oracle_cases.CASES,
    *,
    cache_root: Path | None = None,
    compiler: str = "cc",
    timeout: float = TIMEOUT,
    properties: Sequence[tuple[str, str]] = (),
    timed: Sequence[str] = (),
    released: tuple[str, Mapping[str, float]] | None = None,
    time_tolerance: float = 0.25,
) -> GateResult:
    """Compile the driver for the build (cached under ``cache_root``, default ``work_dir``), run every case on
    ``device``, judge; then, for each ``timed`` case, the op's time against the ``released`` record's samples (its pin
    and metrics) when there is one. A driver that does not compile against the build's headers is the gate's error:
    the header is the contract, and it changed."""
    t0 = time.monotonic()
    build = plan_driver(lib_dir, include_dir, cache_root or work_dir, compiler)
    try:
        driver = compile_driver(build, timeout)
    except CommandFailed as exc:
        message = COMPILE_FAILED.format(include=include_dir, tail=compiler_errors(exc.tail))
        return GateResult(GATE, Status.ERROR, message, problems=(message,), seconds=time.monotonic() - t0)
    runs = run_cases(driver, device, floors, work_dir, cases, lib_dir=lib_dir, timeout=timeout)
    props = (("driver_key", build.key[:16]), *properties)
    result = judge([(r.result, r.score) for r in runs], floors, device, time.monotonic() - t0, props)
    if not timed:
        return result
    return _with_times(result, driver, lib_dir, device, work_dir, [c for c in cases if c.id in timed], released, time_tolerance, t0)


def _with_times(
    result: GateResult,
    driver: Path,
    lib_dir: Path,
    device: str,
    work_dir: Path,
    timed: Sequence[Case],
    released: tuple[str, Mapping[str, float]] | None,
    time_tolerance: float,
    t0: float,
) -> GateResult:
    """``result`` with a case per timed case (:mod:`ci.gates.oracle.timing`), its samples in the metrics and the
    release it compared with (``released_pin``, "" for none) in the properties."""
    threads = default_threads(device)
    time_cases, metrics = [], list(result.metrics)
    for case in timed:
        samples: tuple[float, ...] = ()
        for _ in range(2):  # an inconclusive comparison is measured as many samples again, once
            measured = run_case(driver, device, case, work_dir, lib_dir=lib_dir, threads=threads, bench=timing.SAMPLES)
            samples += measured.samples_ms
            judged = timing.judge_time(case.id, samples, released, time_tolerance)
            if not judged.inconclusive:
                break
        time_cases.append(judged)
        metrics += timing.metrics_of(case.id, samples) if samples else ()
    cases_out = (*result.cases, *time_cases)
    problems = (*result.problems, *(c.message for c in time_cases if not c.status.ok))
    status = result.status
    if status is Status.PASSED and any(not c.status.ok for c in time_cases):
        status = Status.FAILED if any(c.status is Status.FAILED for c in time_cases) else Status.ERROR
    summary = result.summary if status is result.status else f"{status.value.upper()}{result.summary[len(result.status.value):]}; {problems[-1]}"
    return dataclasses.replace(
        result, status=status, summary=summary, cases=cases_out, problems=problems, counts=case_counts(cases_out),
        properties=(*result.properties, ("released_pin", released[0] if released is not None else "")), metrics=tuple(metrics),
        seconds=time.monotonic() - t0,
    )  # fmt: skip
