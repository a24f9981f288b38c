"""``nox -s gpu_tests``: every gate against the binaries of the current build, never stale ones, each result
recorded in one place (:func:`record`: its JSON, its JUnit and a ledger line naming the build it judged).

The ledger is what ``nox -s ship`` counts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ci.compile.context import Context
from ci.compile.stage import current_build
from ci.errors import ConfigError, GateFailed, ServerFailed
from ci.files import shown
from ci.gates import backend_ops, equivalence, results
from ci.gates.backend_ops_output import OP_RE
from ci.gates.equivalence import EquivalencePlan
from ci.gates.registry import BuildUnderTest, GateOptions, select
from ci.gates.results import GateResult, Status
from ci.release import binding, ledger


@dataclass(frozen=True)
class GpuTestsRequest:
    profile: str
    gates: tuple[str, ...] = ()  # none: every gate ship requires (registry.required)
    out: Path | None = None
    options: GateOptions = field(default_factory=GateOptions)


def record(
    result: GateResult,
    out: Path,
    properties: Mapping[str, str] | None = None,
    *,
    ledger_path: Path | None = None,
    build: ledger.BuildContext | None = None,
    root: Path | None = None,
) -> ledger.Record | None:
    """A gate's record: ``out/<gate>.json``, ``out/<gate>.junit.xml``, and, given a ledger, its line there."""
    json_path, junit_path = out / f"{result.gate}.json", out / f"{result.gate}.junit.xml"
    results.write_json(json_path, result)
    results.write_junit(junit_path, [result], properties)
    if ledger_path is None:
        return None
    artefacts = {"json": shown(json_path, root), "junit": shown(junit_path, root)} if root else {}
    return ledger.append(ledger_path, result, build or ledger.BuildContext(), artefacts)


def run_gpu_tests(ctx: Context, request: GpuTestsRequest, say: Callable[[str], None]) -> list[GateResult]:
    build = current_build(ctx, request.profile)
    manifest = build.manifest
    key = manifest.key
    out = request.out or ledger.default_results_dir(ctx.root) / key[:12]
    out.mkdir(parents=True, exist_ok=True)
    context = binding.context_of(ctx.pins, manifest)  # the binaries and the criteria each record judged
    say(f"gpu_tests: {manifest.profile} build {key[:12]} (pin {manifest.pin_commit[:7]}, patches {manifest.series_digest[:12]}), device {manifest.device}")
    target = BuildUnderTest(ctx, build)
    done: list[GateResult] = []
    for gate in select(request.gates, ctx.pins):
        say(f"gpu_tests: {gate.name} ...")
        result = gate.run(target, request.options, out)
        line = record(result, out, {"build_key": key, "profile": manifest.profile}, ledger_path=ledger.ledger_path(ledger.default_results_dir(ctx.root)), build=context, root=ctx.root)
        say(f"gpu_tests: {gate.name}: {result.status.value}: {result.summary} (ledger line {line.line if line else '?'})")
        if getattr(gate, "shows_cases", False):  # the perf gate: each check's figures, and where its chart is
            for case in result.cases:
                say(f"  {case.message}")
            say(f"  chart: {dict(result.properties).get('chart', '?')}")
        done.append(result)
    results.write_junit(out / "gpu_tests.junit.xml", done, {"build_key": key, "profile": manifest.profile, "pin": manifest.pin_commit})
    return done


def judge_saved_log(ctx: Context, profile_name: str, log: Path, sql: Path | None, out: Path | None) -> GateResult:
    """``gpu_tests --from-log``: a GPU box's saved console log judged here against the pin, and recorded."""
    device = ctx.profile(profile_name).device
    result = backend_ops.judge_log(log, device, ctx.pins.expected_cases(), ctx.pins.fork.commit, False, "", sql_path=sql)
    results_dir = ledger.default_results_dir(ctx.root)
    record(
        result,
        out or results_dir / "from-log",
        {"profile": profile_name, "source": str(log)},
        ledger_path=ledger.ledger_path(results_dir),
        build=ledger.BuildContext(profile=profile_name, device=device),
    )
    return result


def report(done: Sequence[GateResult], title: str, say: Callable[[str], None]) -> None:
    """The table, the job summary, each problem; GateFailed when a gate did not pass."""
    say(summary_table(done))
    step_summary(summary_markdown(done, title))
    failed = [r for r in done if not r.ok]
    for r in failed:
        for problem in r.problems:
            say(f"  {r.gate}: {problem}")
    if failed:
        raise GateFailed(f"gpu_tests: {len(failed)} of {len(done)} gates did not pass: {', '.join(r.gate for r in failed)}")
    say(f"gpu_tests: all {len(done)} gates passed")


def step_summary(markdown: str) -> None:
    """Append to the CI job's summary page when there is one (GitHub Actions sets GITHUB_STEP_SUMMARY)."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")


def summary_table(gate_results: Sequence[GateResult]) -> str:
    rows: list[tuple[str, ...]] = [("gate", "verdict", "passed", "failed", "skipped", "error", "seconds", "summary")]
    for r in gate_results:
        rows.append(
            (
                r.gate,
                r.status.value.upper() if not r.ok else r.status.value,
                *(str(r.count(k)) for k in ("passed", "failed", "skipped", "error")),
                f"{r.seconds:.1f}",
                r.summary,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1] for row in rows)


def summary_markdown(gate_results: Sequence[GateResult], title: str) -> str:
    """The summary table as GitHub markdown, for a CI job's summary page (``$GITHUB_STEP_SUMMARY``)."""
    lines = [f"### {title}", "", "| gate | verdict | passed | failed | skipped | error | seconds | summary |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in gate_results:
        counts = " | ".join(str(r.count(k)) for k in ("passed", "failed", "skipped", "error"))
        verdict = r.status.value if r.ok else f"**{r.status.value.upper()}**"
        lines.append(f"| {r.gate} | {verdict} | {counts} | {r.seconds:.1f} | {_cell(r.summary)} |")
    for r in gate_results:
        lines += [f"- {r.gate}: {_cell(p.splitlines()[0] if p else p)}" for p in r.problems[:10]]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")



# -- one gate on its own, outside a build: JSON and JUnit, no ledger ------------------------------------------------


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
            raise ConfigError(f'--expect "{value}": not OP=N with N cases, 1 or more (e.g. --expect GATED_DELTA_NET=54)')
        if op in out:
            raise ConfigError(f"--expect {op}: given twice")
        out[op] = int(count)
    return out


def backend_ops_session(find: Callable[[], Context], request: BackendOpsRequest, say: Callable[[str], None]) -> int:
    """``python -m ci backend-ops``: the gate on a binary or a saved log; the pin's expectations inside the project."""
    if request.from_sql and not request.from_log:
        raise ConfigError("--from-sql FILE goes with --from-log FILE (a run makes its own sql output)")
    if request.from_log and request.binary:
        raise ConfigError("--binary and --from-log: give one (--from-log judges a saved log and runs nothing)")
    expected = expectations(request.expect)
    pinned = None if request.pinned_commit == "none" else request.pinned_commit
    root: Path | None = None
    if not expected or request.pinned_commit is None:
        try:
            ctx = find()
            pins = ctx.pins
        except ConfigError as exc:
            flags = " and ".join(f for f, missing in (("--expect OP=N", not expected), ("--pinned-commit SHA|none", request.pinned_commit is None)) if missing)
            raise ConfigError(f"{exc.message}; outside the project give {flags}") from None
        root = ctx.root
        expected = expected or pins.expected_cases()
        if not expected:
            raise ConfigError("pins.yaml: expect.backend_ops: no expectations; add them there or give --expect OP=N")
        if request.pinned_commit is None:
            pinned = pins.fork.commit
    if request.timeout <= 0:
        raise ConfigError(f"--timeout {request.timeout:g}: must be more than 0 seconds")
    dirty = backend_ops.DirtyRule(request.dirty) if request.dirty else None
    out = request.out or (root or Path.cwd()) / "build" / "gates"
    if request.from_log:
        result = backend_ops.judge_log(request.from_log, request.device, expected, pinned, request.patched, request.build_key, dirty=dirty, sql_path=request.from_sql)
    else:
        if request.binary is None:
            raise ConfigError("--binary PATH is required (the build's test-backend-ops), unless --from-log FILE judges a saved log")
        if not request.binary.is_file() or not os.access(request.binary, os.X_OK):
            raise ConfigError(f"--binary {request.binary}: not an executable file; give the build's test-backend-ops")
        result = backend_ops.run_gate(
            request.binary, request.device, expected, pinned, request.patched, request.timeout, out / "backend_ops-logs", request.build_key, dirty=dirty
        )
    return _one_gate(result, out, say)


def equivalence_session(equivalence_plan: EquivalencePlan, out: Path, say: Callable[[str], None]) -> int:
    """``python -m ci equivalence``: the gate on a llama-server and two models."""
    return _one_gate(equivalence.run(equivalence_plan, out / "equivalence-logs"), out, say)


def _one_gate(result: GateResult, out: Path, say: Callable[[str], None]) -> int:
    record(result, out)
    say(f"{result.gate}: {result.summary}")
    for problem in result.problems:
        say(f"  - {problem}")
    say(f"{result.gate}: wrote {out / f'{result.gate}.json'} and {out / f'{result.gate}.junit.xml'}")
    if result.ok:
        return 0
    return GateFailed.exit_code if result.status is Status.FAILED else ServerFailed.exit_code


def gate_selftest_session(
    ctx: Context, profile: str, faults: Path | None, only: Sequence[str], say: Callable[[str], None], jobs: int = 0, keep: bool = False
) -> int:
    """``nox -s gate_selftest``: every fault of the profile planted and judged; the record goes to the ledger under
    the build key, for ship when pins.yaml release.require names gate_selftest."""
    from ci.gates import selftest

    build = current_build(ctx, profile)
    result, shown = selftest.selftest(ctx, profile, faults, only, say, jobs, keep)
    m = build.manifest
    results_dir = ledger.default_results_dir(ctx.root)
    out = results_dir / m.key[:12]
    line = record(
        result, out, {"build_key": m.key, "profile": m.profile}, ledger_path=ledger.ledger_path(results_dir),
        build=binding.context_of(ctx.pins, m), root=ctx.root,
    )  # fmt: skip
    say(shown)
    say(f"gate_selftest: {result.summary} (ledger line {line.line if line else '?'})")
    step_summary(f"### gate_selftest, profile {profile}\n\n```\n{shown}\n```\n")
    if not result.ok:
        for problem in result.problems:
            say(f"  {problem}")
        raise GateFailed(f"gate_selftest: {sum(not c.status.ok for c in result.cases)} of {len(result.cases)} faults not as expected")
    return 0
