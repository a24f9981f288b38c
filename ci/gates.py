"""``nox -s gpu_tests``: every gate against the binaries of the current build, never stale ones.

The route tests (no GPU), the test-backend-ops gate on the profile's device, and the greedy-equivalence gate
with the build's llama-server. Each gate's result is written as JSON and JUnit and appended to the ledger with
the build's key, which is what ``nox -s ship`` counts.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ci import ledger, profiles, results
from ci.build import BuildRequest, Manifest, current_build
from ci.command import run
from ci.errors import ConfigError
from ci.project import Project
from ci.results import CaseResult, GateResult, Status, case_counts

log = logging.getLogger("onebit-ci")

GATES = ("route", "backend_ops", "equivalence")


@dataclass(frozen=True)
class GpuTestsRequest:
    profile: str = "gfx1151"
    gates: tuple[str, ...] = GATES
    out: Path | None = None
    timeout: float = 600.0
    model: Path | None = None  # the equivalence gate's target; default pins.yaml, else tiny models
    drafter: Path | None = None
    tokens: int | None = None


def select(names: Sequence[str]) -> tuple[str, ...]:
    from ci.schema import did_you_mean

    for n in names:
        if n not in GATES:
            raise ConfigError(f"--gate {n}: unknown gate{did_you_mean(n, GATES)}; gates: {', '.join(GATES)}")
    return tuple(g for g in GATES if g in names) if names else GATES


# -- the route gate: the serve launcher's no-GPU tests, as one gate ------------------------------------------


SOURCE_ROOT = Path(__file__).resolve().parents[1]  # the onebit-ci checkout: the launcher and its route tests


def route_gate(out: Path, source: Path = SOURCE_ROOT) -> GateResult:
    """``pytest tests/route`` of this onebit-ci checkout in a child process, its JUnit read back into a GateResult."""
    if not (source / "tests" / "route").is_dir():
        raise ConfigError(f"{source}: no tests/route; run the gates from a checkout of onebit-ci, not an installed copy")
    junit = out / "route.pytest.junit.xml"
    junit.unlink(missing_ok=True)
    started = time.monotonic()
    done = run(
        [sys.executable, "-m", "pytest", "tests/route", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"],
        cwd=source,
        check=False,
        what="pytest tests/route",
    )
    seconds = time.monotonic() - started
    cases = _junit_cases(junit) if junit.is_file() else []
    problems = []
    if not cases:
        problems.append(f"pytest tests/route ran no test (exit status {done.returncode}): {done.output.strip().splitlines()[-1:] or ''}")
    failed = [c for c in cases if c.status in (Status.FAILED, Status.ERROR)]
    problems += [f"{c.classname}::{c.name}: {c.message}" for c in failed[:20]]
    if done.returncode != 0 and not problems:
        problems.append(f"pytest tests/route exited with status {done.returncode}")
    status = Status.PASSED if not problems else Status.FAILED
    summary = f"{sum(c.status is Status.PASSED for c in cases)}/{len(cases)} route tests passed"
    return GateResult("route", status, summary, tuple(cases), tuple(problems), case_counts(cases), seconds=seconds)


def _junit_cases(path: Path) -> list[CaseResult]:
    from junitparser import Error, Failure, JUnitXml, Skipped

    out = []
    for suite in JUnitXml.fromfile(str(path)):
        for case in suite:
            status, message = Status.PASSED, ""
            for r in case.result:
                if isinstance(r, Failure):
                    status, message = Status.FAILED, (r.message or "")
                elif isinstance(r, Error):
                    status, message = Status.ERROR, (r.message or "")
                elif isinstance(r, Skipped):
                    status, message = Status.SKIPPED, (r.message or "")
            out.append(CaseResult(case.name, status, message.splitlines()[0] if message else "", case.classname or "", seconds=case.time or 0.0))
    return out


# -- the session ------------------------------------------------------------------------------------------------


def backend_ops_gate(project: Project, manifest: Manifest, build_dir: Path, out: Path, timeout: float) -> GateResult:
    from ci import backend_ops
    from ci.patches import PATCHES_DIR, load_series

    pins = project.load_pins()
    series = load_series(project.root / PATCHES_DIR)
    # ggml's build commit says -dirty exactly when the checkout's ggml/ differs from the pin: the series touches it
    dirty = backend_ops.DirtyRule.DIRTY if series.touches("ggml/") else backend_ops.DirtyRule.CLEAN
    return backend_ops.run_gate(
        manifest.binary(build_dir, "test-backend-ops"),
        manifest.device,
        pins.expected_cases(),
        pins.fork.commit,
        bool(series.patches),
        timeout,
        out / "backend_ops-logs",
        manifest.key,
        dirty=dirty,
    )


def equivalence_gate(project: Project, manifest: Manifest, build_dir: Path, out: Path, request: GpuTestsRequest) -> GateResult:
    from ci import equivalence, tinymodels

    config = project.load_pins().equivalence
    model, drafter = request.model, request.drafter
    if model is None and config.model is not None and config.drafter is not None:
        model, drafter = project.root / config.model, project.root / config.drafter
    if model is None or drafter is None:
        models = tinymodels.write_tiny_models(build_dir / "tiny-models")
        model, drafter = models.target, models.drafter
    device = profiles.get(manifest.profile).serve_device
    the_plan = equivalence.plan(
        model=model,
        drafter=drafter,
        llama_server=manifest.binary(build_dir, "llama-server"),
        spec_type=config.spec_type,
        tokens=request.tokens or config.tokens,
        near_tie=config.near_tie_nats,
        device=device,
        build_key=manifest.key,
    )
    return equivalence.run(the_plan, out / "equivalence-logs")


def run_gpu_tests(project: Project, request: GpuTestsRequest, say: Callable[[str], None]) -> list[GateResult]:
    manifest, key = current_build(project, BuildRequest(profile=request.profile))
    build_dir = project.root / "build" / request.profile
    out = request.out or ledger.default_results_dir(project.root) / key[:12]
    out.mkdir(parents=True, exist_ok=True)
    context = ledger.BuildContext(key, manifest.pin["commit"], manifest.patches["digest"], manifest.profile, manifest.device)
    say(f"gpu_tests: {manifest.profile} build {key[:12]} (pin {manifest.pin['commit'][:7]}, patches {manifest.patches['digest'][:12]}), device {manifest.device}")
    done: list[GateResult] = []
    for gate in request.gates:
        say(f"gpu_tests: {gate} ...")
        if gate == "route":
            result = route_gate(out)
        elif gate == "backend_ops":
            result = backend_ops_gate(project, manifest, build_dir, out, request.timeout)
        else:
            result = equivalence_gate(project, manifest, build_dir, out, request)
        results.write_json(out / f"{gate}.json", result)
        results.write_junit(out / f"{gate}.junit.xml", [result], {"build_key": key, "profile": manifest.profile})
        record = ledger.append(
            ledger.ledger_path(ledger.default_results_dir(project.root)),
            result,
            context,
            {"json": _rel(out / f"{gate}.json", project.root), "junit": _rel(out / f"{gate}.junit.xml", project.root)},
        )
        say(f"gpu_tests: {gate}: {result.status.value}: {result.summary} (ledger line {record.line})")
        done.append(result)
    results.write_junit(out / "gpu_tests.junit.xml", done, {"build_key": key, "profile": manifest.profile, "pin": manifest.pin["commit"]})
    return done


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


def _rel(path: Path, root: Path) -> str:
    try:
        return os.path.relpath(path, root)
    except ValueError:
        return str(path)
