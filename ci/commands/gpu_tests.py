"""``nox -s gpu_tests``: every gate ship requires (or those named) on the current build, never a stale one, each
result recorded once (:func:`ci.release.records.record`: JSON, JUnit and a ledger line naming the build it judged).
``--from-log`` judges a GPU box's saved test-backend-ops log here instead."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ci import loaded
from ci.commands import absolute, folder, given, job_of, say
from ci.commands.job import Job, current
from ci.compile.manifest import Artifact, Sealed
from ci.compile.stage import CurrentBuild
from ci.errors import ConfigError, Refused
from ci.gates import results
from ci.gates.backend_ops import run as backend_ops
from ci.gates.protocol import Gate
from ci.gates.registry import select
from ci.gates.results import GateResult, Status
from ci.gates.target import BuildUnderTest, GateOptions
from ci.release import binding, compile_record, ledger, records, standings
from ci.release.binding import ELSEWHERE_PROPERTY, LOADED_PROPERTY

# Messages, shared with the tests that match on them (tests/support/messages.py)
ON_BUILD = "gpu_tests: {profile} build {key} (pin {pin}, patches {patches}), device {device}"
GATE_DONE = "gpu_tests: {gate}: {status}: {summary} (ledger line {line})"
TITLE = "gpu_tests, profile {profile}"  # the job summary's heading
NOT_AS_BUILT = "the {profile} build's {files}, hashed before the gates: not as build.json records; build it again (nox -s build -- --profile {profile})"
CHANGED_DURING = "the build's {files} changed while {gate} ran (another inode or ctime than when hashed): run the gates again on an untouched build"
OUT_ELSEWHERE = "--out {out}: inside build/results/{other}, another run's records; give a folder of your own, or leave --out out"


@dataclass(frozen=True)
class GpuTestsRequest:
    profile: str
    gates: tuple[str, ...] = ()  # none: every gate ship requires (registry.required)
    out: Path | None = None
    options: GateOptions = field(default_factory=GateOptions)


def under_test(job: Job, build: CurrentBuild) -> BuildUnderTest:
    """The build and what its gates judge it against, as values."""
    profile = job.profile(build.manifest.profile)
    results_dir = ledger.default_results_dir(job.root)
    return BuildUnderTest(
        build, job.root, job.pins, profile.serve_device, bool(job.series.patches), job.series.touches("ggml/"),
        released=lambda gate: standings.last_record(results_dir, profile.name, build.key, gate),
    )  # fmt: skip


def sealed(build: CurrentBuild) -> Sealed:
    """The build's binaries and libraries hashed now, before any gate runs (:meth:`~ci.compile.manifest.Manifest.sealed`):
    the stat data build.json keeps saves a no-op build its reads, but a gate trusts no file that a user can write."""
    seal, wrong = build.manifest.sealed(build.build_dir)
    if wrong:
        files = ", ".join(f"{name} {what}" for name, what in wrong)
        raise Refused(NOT_AS_BUILT.format(profile=build.manifest.profile, files=files))
    return seal


def watched_run(gate: Gate, target: BuildUnderTest, options: GateOptions, out: Path, seal: Sealed | None = None) -> GateResult:
    """``gate.run`` with the libraries its programs mapped read from them as they ran (:mod:`ci.loaded`) and held to
    the build's: a library of a build library's name from elsewhere makes the result an ERROR naming it; what they
    loaded of the build is recorded (``loaded_libraries``), and what from outside the build and the system's folders
    (``loaded_elsewhere``). With ``seal``, a program or library of the build mapped from another file than the one
    hashed, or any of them changed by the end of the run, makes it an ERROR too."""
    with loaded.watching() as watch:
        result = gate.run(target, options, out)
    build = target.build
    libraries, binaries = (build_files(build, build.manifest.libraries), build_files(build, build.manifest.binaries))
    judged = watch.judge(build.build_dir, libraries, binaries, loaded.system_folders(), seal.inodes() if seal else None)
    moved = seal.moved() if seal else []
    if moved:
        judged.problems.insert(0, CHANGED_DURING.format(files=", ".join(moved), gate=gate.name))
    props = [(LOADED_PROPERTY, ",".join(f"{n}={s}" for n, s in sorted(judged.loaded.items())))] if judged.loaded else []
    props += [(ELSEWHERE_PROPERTY, ",".join(judged.elsewhere))] if judged.elsewhere else []
    result = dataclasses.replace(result, properties=(*result.properties, *props))
    if not judged.problems:
        return result
    return dataclasses.replace(result, status=Status.ERROR, summary=f"ERROR: {judged.problems[0]}", problems=(*judged.problems, *result.problems))


def build_files(build: CurrentBuild, files: Mapping[str, Artifact]) -> list[loaded.Library]:
    """Build.json's binaries or libraries as the watch judges them: name, path, sha256."""
    return [loaded.Library(name, build.build_dir / a.path, a.sha256) for name, a in files.items()]


def own_out(out: Path | None, results_dir: Path, own: str) -> Path:
    """Where a run's JSON, JUnit and logs go: ``--out``, else ``results_dir/own``. An ``--out`` inside another
    folder of ``results_dir`` (another build's records) is refused: its files would be written over."""
    if out is None:
        return results_dir / own
    try:
        first = out.resolve().relative_to(results_dir.resolve()).parts[:1]
    except ValueError:
        return out
    if first and first[0] != own:
        raise ConfigError(OUT_ELSEWHERE.format(out=out, other=first[0]))
    return out


def run_gates(job: Job, build: CurrentBuild, request: GpuTestsRequest, say: Callable[[str], None]) -> list[GateResult]:
    manifest = build.manifest
    key = manifest.key
    results_dir = ledger.default_results_dir(job.root)
    out = own_out(request.out, results_dir, key[:12])
    out.mkdir(parents=True, exist_ok=True)
    say(ON_BUILD.format(profile=manifest.profile, key=key[:12], pin=manifest.pin_commit[:7], patches=manifest.series_digest[:12], device=manifest.device))
    if not request.gates and compile_record.lacks_device(build, job.profile(manifest.profile).backend):
        compiled = compile_record.result(build)  # a HIP build on a machine without its GPU: the compile is the evidence
        line = records.record(
            compiled, out, {"build_key": key, "profile": manifest.profile}, ledger_path=ledger.ledger_path(results_dir),
            build=binding.context_of(job.pins, manifest), root=job.root,
        )  # fmt: skip
        say(compile_record.no_device_line(manifest.profile, manifest.device, line.line if line else None))
        return [compiled]
    seal = sealed(build)
    target = under_test(job, build)
    judging = binding.judging_now()  # every judge imported, and their digest, before any program of the build runs
    done: list[GateResult] = []
    for gate in select(request.gates, job.pins):
        say(f"gpu_tests: {gate.name} ...")
        result = watched_run(gate, target, request.options, out, seal)
        line = records.record(
            result, out, {"build_key": key, "profile": manifest.profile}, ledger_path=ledger.ledger_path(results_dir),
            build=binding.context_of(job.pins, manifest, judging), root=job.root,
        )  # fmt: skip
        say(GATE_DONE.format(gate=gate.name, status=result.status.value, summary=result.summary, line=line.line if line else "?"))
        if gate.flags.shows_cases:  # each case's figures (the perf checks), and where its chart is
            for case in result.cases:
                say(f"  {case.message}")
            say(f"  chart: {dict(result.properties).get('chart', '?')}")
        done.append(result)
    results.write_junit(out / "gpu_tests.junit.xml", done, {"build_key": key, "profile": manifest.profile, "pin": manifest.pin_commit})
    return done


def judge_saved_log(job: Job, profile_name: str, log: Path, sql: Path | None, out: Path | None) -> GateResult:
    """``gpu_tests --from-log``: a GPU box's saved console log judged here against the pin, and recorded."""
    device = job.profile(profile_name).device
    results_dir = ledger.default_results_dir(job.root)
    where = own_out(out, results_dir, "from-log")  # refused before the log is judged
    result = backend_ops.judge_log(log, device, job.pins.expected_cases(), job.pins.fork.commit, False, "", sql_path=sql)
    records.record(
        result,
        where,
        {"profile": profile_name, "source": str(log)},
        ledger_path=ledger.ledger_path(results_dir),
        build=ledger.BuildContext(profile=profile_name, device=device),
    )
    return result


def main(args: argparse.Namespace) -> int:
    out = folder(args.out, "--out", "the JSON, JUnit and logs")
    job = job_of(args)
    if args.from_log:
        done = [judge_saved_log(job, args.profile, Path(args.from_log), given(args.from_sql), out)]
    else:
        if (args.model is None) != (args.drafter is None):
            raise ConfigError("--model and --drafter go together (the equivalence gate's target and drafter)")
        options = GateOptions(timeout=args.timeout, rounds=args.rounds, model=absolute(args.model), drafter=absolute(args.drafter), tokens=args.tokens)
        done = run_gates(job, current(job, args.profile), GpuTestsRequest(args.profile, tuple(args.gate), absolute(args.out), options), say)
    records.report(done, TITLE.format(profile=args.profile), say)
    return 0
