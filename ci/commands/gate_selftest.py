"""``nox -s gate_selftest``: every fault of the profile planted in a copy of the fork and judged, side by side; the
record goes to the ledger under the build key, for ship when pins.yaml's release.require names gate_selftest.
``selftest-fault``: one fault, inside its own mount namespace (the self-test runs it)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ci import defaults, places
from ci.command import run
from ci.commands import absolute, job_of, say
from ci.commands.gpu_tests import under_test, watched_run
from ci.commands.job import Job, current
from ci.compile.cmake import BuildRequest, build_environment
from ci.compile.manifest import Manifest
from ci.compile.stage import CurrentBuild, current_build
from ci.errors import ConfigError, GateFailed
from ci.files import shown, write_json
from ci.gates import registry
from ci.gates.selftest import run as selftest
from ci.gates.target import GateOptions
from ci.pin.pins import Pins
from ci.release import binding, ledger, records, standings

# Messages, shared with the tests that match on them (tests/support/messages.py)
VERDICT_LINE = "gate_selftest: {summary} (ledger line {line})"
FAILING_RECORD = "{verdict}: {ledger} line {line}"  # which record says a gate fails the unplanted build
WORK_DIRECTORY = "--work (the fault's directory, under {area})"  # what places.OUTSIDE names


def session(
    job: Job,
    build: CurrentBuild,
    faults: Path | None,
    only: Sequence[str],
    say: Callable[[str], None],
    jobs: int = 0,
    keep: bool = False,
    timeout: float = defaults.FAULT_TIMEOUT,
) -> int:
    profile = build.manifest.profile
    m = build.manifest
    results_dir = ledger.default_results_dir(job.root)
    book = ledger.ledger_path(results_dir)
    read = ledger.read(book, ledger.signing_key())  # once, for every gate: read here where the key is
    failing = unplanted_failures(book, m, job.pins, job.root, read)
    # what each gate compares with: a fault's child gets no key, and reads no signed ledger
    released = {gate: standings.released_record(read, profile, m.key, gate) for gate in registry.runnable()}
    result, shown = selftest.selftest(
        build.key, job.source(), job.root, build.build_dir, profile, faults, only, say, jobs, keep, timeout, failing, released
    )
    line = records.record(
        result, results_dir / m.key[:12], {"build_key": m.key, "profile": m.profile}, ledger_path=book,
        build=binding.context_of(job.pins, m), root=job.root,
    )  # fmt: skip
    say(shown)
    say(VERDICT_LINE.format(summary=result.summary, line=line.line if line else "?"))
    records.step_summary(f"### gate_selftest, profile {profile}\n\n```\n{shown}\n```\n")
    if not result.ok:
        for problem in result.problems:
            say(f"  {problem}")
        raise GateFailed(f"gate_selftest: {sum(not c.status.ok for c in result.cases)} of {len(result.cases)} faults not as expected")
    return 0


def unplanted_failures(ledger_file: Path, manifest: Manifest, pins: Pins, root: Path | None = None, book: ledger.Ledger | None = None) -> dict[str, str]:
    """The gates that stand FAILED for this build, read as ship reads the ledger (:func:`standings.for_build`): gate ->
    which record. A fault judged by such a gate would be caught by the pin itself, and a benign edit alarm for the
    same reason; a failure ship does not count (a run on models of one's own) blocks nothing. ``book``: the ledger
    when read already."""
    if not ledger_file.is_file():
        return {}
    if book is None:  # a signed ledger (ONEBIT_LEDGER_KEY) is read as ship reads it
        book = ledger.read(ledger_file, ledger.signing_key())
    found = {}
    for s in standings.for_build(book, manifest, pins, registry.runnable()):
        if s.state is standings.Standing.FAILED and s.record is not None:
            found[s.gate] = FAILING_RECORD.format(verdict=s.record.verdict, ledger=shown(ledger_file, root), line=s.record.line)
    return found


def main(args: argparse.Namespace) -> int:
    job = job_of(args)
    build = current(job, args.profile)  # refused unless the build is exactly the current one
    return session(job, build, absolute(args.faults), tuple(args.fault), say, args.jobs, args.keep, args.fault_timeout)


def selftest_fault(args: argparse.Namespace) -> int:
    """In the fault's own mount namespace: bind the copies over the user's paths, rebuild there (only what the fault
    touched), and run the fault's gates on those binaries."""
    fault = next((f for f in selftest.load_faults(absolute(args.faults)) if f.id == args.fault), None)
    if fault is None:
        raise ConfigError(f"--fault {args.fault}: no such fault")
    job = job_of(args)
    area = job.root / "build" / "selftest" / args.profile
    trial = selftest.Trial(fault, places.inside(area, Path(args.work), WORK_DIRECTORY.format(area=shown(area, job.root))))
    if trial.work.name != fault.id:
        raise ConfigError(f"--work {args.work}: not the directory of fault {fault.id} ({shown(area / fault.id, job.root)})")
    plan = job.build_plan(BuildRequest(profile=args.profile))
    build = current_build(plan, job.root)  # the user's build, before the copies hide it
    for copy, over in ((trial.src, job.root / job.pins.submodule), (trial.build, build.build_dir)):
        run(["mount", "--bind", str(copy), str(over)], what="mount --bind")
    t = time.monotonic()
    with (trial.work / "build.log").open("w") as log:
        run(list(plan.build_argv), env=build_environment(plan), log_file=log, what=f"rebuild with {fault.id}")  # as a build's: no key
    rebuild = time.monotonic() - t
    target = under_test(job, build)
    if selftest.RELEASED_VAR in os.environ:  # the parent's reading of the ledger: this child holds no key
        target = dataclasses.replace(target, released=selftest.released_from(Path(os.environ[selftest.RELEASED_VAR])))
    for gate in registry.select(fault.gates, job.pins):
        result = watched_run(gate, target, GateOptions(planted=True), trial.out)
        write_json(trial.out / f"{gate.name}.json", result.to_json())
    write_json(trial.work / "rebuild.json", {"seconds": round(rebuild, 2)})
    say(f"selftest-fault: {fault.id}: rebuilt in {rebuild:.1f} s, ran {', '.join(fault.gates)}")
    return 0
