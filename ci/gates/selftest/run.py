"""``nox -s gate_selftest``: gates that prove they can fail. Known faults (faults.yaml) are planted, each in a copy of
the pinned fork built incrementally from the current build; each gate must catch its own and pass the benign edits.

Nothing of the user's is touched: the checkout and the build are copied (``cp -a``, times kept) under
``build/selftest/<profile>/<fault>/`` and, in a mount namespace of its own, bind-mounted over the user's paths, so
CMake and Ninja rebuild only what the fault touched. A fault whose anchor no longer occurs once is *stale*, named.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci import defaults, places
from ci.command import open_log, resolve, run
from ci.compile.ninja import reconcile
from ci.environment import NEVER_PASSED, environment
from ci.errors import ConfigError, ToolchainError
from ci.files import write_json
from ci.gates import registry
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.gates.selftest import NAME
from ci.gates.selftest import faults as fault_set
from ci.gates.selftest.faults import FAULTS, Fault, KnownGates, faults_sha256, files_at, stale, unjudged
from ci.gates.serving.launcher import process_bytecode, with_bytecode
from ci.git import Git
from ci.places import id_problem, relative_problem
from ci.processes import end_tree, tree_marked
from ci.schema import load_json
from ci.source.sync import Source
from serve.bounded import CONFIG_LIMIT, is_regular, read_text

GATE = NAME
FAULT_TIMEOUT_NOT_POSITIVE = "--fault-timeout {timeout:g}: must be more than 0 seconds"
FAULT_SAYS = "gate_selftest: {fault}: {what}"
ENDED_AT_TIMEOUT = "ended after {timeout:g} s (--fault-timeout) before {missing} finished; its run's last line: {last}"
GOT_STALE = "stale"
GOT_CARRIED = "stale: the series carries it"  # a fix-fault whose fix the series carries: as it should be
GOT_NOT_RUN = "not run"
GOT_GATE = "{gate} {status}"  # a fault whose gates gave different verdicts: each gate's, joined by ", "
MISSED_BY = " (missed by {gates})"
MISSED_BY_PASSED = ", {gates} passed"
# the summary: SUMMARY, SUMMARY_FIXES when a fix the pin lacks ran, then SUMMARY_TIMES, then SUMMARY_SLOWEST when a fault ran
SUMMARY = "{verdict}: {caught}/{faults} faults caught by their gates, {benign}/{benigns} benign edits passed every gate"
SUMMARY_FIXES = ", {fixed}/{fixes} fixes the pin lacks passed their gates"
SUMMARY_TIMES = "; {seconds:.1f} s in all, {width} at a time"
SUMMARY_SLOWEST = ", {ratio:.2f}x the slowest fault ({slowest:.1f} s)"
SUMMARY_CARRIED = ", {carried} fix(es) carried by the series"
# a fault not judged (faults.NOT_JUDGED, which ends "make it pass first"), and how: the gate's fix-fault carried as a
# patch (NEXT_CARRY_FIX), or the gate's failure found and fixed (NEXT_FIND). At c14872f equivalence fails the bare pin
# and 5 of 6 faults were "not judged; make it pass first", with no word of the fix the self-test itself plants.
NOT_JUDGED_NEXT = "{why}: {steps}"
NEXT_CARRY_FIX = (
    "carry the fix that {fix} plants ({file}) as a patch of the series (docs/patches.md#add-a-patch), "
    "rebuild, rerun nox -s gpu_tests -- --profile {profile} and then this self-test"
)
NEXT_FIND = "nox -s gpu_tests -- --profile {profile} says why {gate} fails; fix that in the pin or the series, then rerun this self-test"
# after the run: a fix-fault passed planted while faults of its gate were not judged
FIX_PASSED_NEXT = (
    "passed {gate} planted: carry its fix ({file}) as a patch of the series (docs/patches.md#add-a-patch), rebuild and "
    "rerun, and the {count} fault(s) not judged here are judged"
)
# a fix-fault gone stale because the fix is there: said instead of faults.STALE_NO_MATCH
SERIES_CARRIES_FIX = "the series carries this fix: stale as it should be; drop the fault when the pin carries it"
PIN_CARRIES_FIX = "the pin carries this fix: drop the fault from {faults}"
# plant's refusals of the fault's file in the copy of the fork
PLANT_MISSING = "fault {fault}: file {file}: does not exist in the fork at the pin (pin + series); aim the fault at a file the fork has"
PLANT_NOT_REGULAR = "fault {fault}: file {file}: not a regular file in the fork (a link or a directory); plant faults in a file of its own"


def known_gates() -> KnownGates:
    """The gates a fault may name, from the registry."""
    return KnownGates(registry.plantable(), registry.always())


def load_faults(path: Path | None = None) -> tuple[Fault, ...]:
    """faults.yaml (:func:`fault_set.load_faults`), each gate it names checked against the registry."""
    return fault_set.load_faults(path, known_gates())


def stale_lines(gitdir: Path, tree: str) -> list[str]:
    """bump_pin's report: each committed fault that no longer applies at ``tree`` (:func:`fault_set.stale_lines`)."""
    return fault_set.stale_lines(gitdir, tree, known_gates())


# -- one fault, inside its mount namespace ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Trial:
    """Where one fault is planted and built: ``work/src`` over the checkout, ``work/build`` over the build dir."""

    fault: Fault
    work: Path

    @property
    def src(self) -> Path:
        return self.work / "src"

    @property
    def build(self) -> Path:
        return self.work / "build"

    @property
    def out(self) -> Path:
        return self.work / "gates"


def plant(checkout: Path, build_dir: Path, fault: Fault, root: Path) -> Trial:
    """Copy the checkout and the build (modification times kept, then put back where the checkout was written again
    since the build: :func:`ci.compile.ninja.reconcile`), and write the fault into the copy."""
    if (why := id_problem(fault.id)) is not None:
        raise ConfigError(f"fault {fault.id!r}: not a fault id ({why})")
    root.mkdir(parents=True, exist_ok=True)
    trial = Trial(fault, places.inside(root, root / fault.id, f"fault {fault.id}: its directory"))
    shutil.rmtree(trial.work, ignore_errors=True)
    trial.work.mkdir(parents=True)
    for src, dst in ((checkout, trial.src), (build_dir, trial.build)):
        run(["cp", "-a", "--reflink=auto", str(src), str(dst)], what=f"cp -a {src.name}")
    # the copy keeps the build's view of every file the fault does not edit, even when the checkout was written again
    # since the build (its files all newer than the objects: each fault rebuilt all 295 steps, 735 s, issue 45)
    reconcile(trial.build, trial.src, copy_of=(checkout, build_dir))
    if (why := relative_problem(fault.file)) is not None:
        raise ConfigError(f"fault {fault.id}: file {fault.file}: {why}")
    target = places.inside(trial.src, trial.src / fault.file, f"fault {fault.id}: file")
    if not os.path.lexists(trial.src / fault.file):
        raise ConfigError(PLANT_MISSING.format(fault=fault.id, file=fault.file))
    if not is_regular(trial.src / fault.file):
        raise ConfigError(PLANT_NOT_REGULAR.format(fault=fault.id, file=fault.file))
    text = read_text(target, CONFIG_LIMIT * 4)
    why = stale(fault, text)
    if why is not None:
        raise ConfigError(why)
    target.write_text(text.replace(fault.search, fault.replace), encoding="utf-8")
    return trial


def private_mounts() -> list[str]:
    """``unshare`` for a mount namespace of the program's own (a fault's, a try's): root may mount; others map
    themselves to root."""
    return ["unshare", "--mount", "--propagation", "private", *([] if os.geteuid() == 0 else ["--map-root-user"])]


def namespace_argv(project_root: Path, profile: str, trial: Trial, faults: Path | None) -> list[str]:
    """:func:`private_mounts` around this program's ``selftest-fault``."""
    if shutil.which("unshare") is None:
        raise ToolchainError("gate_selftest: unshare (util-linux) not found on PATH; it gives each fault a mount namespace of its own")
    unshare = private_mounts()
    inner = [sys.executable, "-m", "ci", "--root", str(project_root), "selftest-fault", "--profile", profile, "--fault", trial.fault.id, "--work", str(trial.work)]
    if faults is not None:
        inner += ["--faults", str(faults)]
    return [*unshare, "--", *inner]


# -- the self-test ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    fault: Fault
    got: dict[str, Status]  # per gate
    problem: str  # the first problem of the gate that decides, or why it could not run
    seconds: float
    rebuild: float = 0.0
    stale: bool = False
    carried: bool = False  # a fix-fault whose fix the series carries (stale as it should be)
    blocked_by: tuple[str, ...] = ()  # not judged: the gates that fail the unplanted build

    @property
    def ok(self) -> bool:
        if self.carried:
            return True
        if self.stale or set(self.got) != set(self.fault.gates):  # a run that stopped early judged only part of it
            return False
        return all(s is self.fault.wanted(g) for g, s in self.got.items())

    @property
    def got_text(self) -> str:
        if self.carried:
            return GOT_CARRIED
        if self.stale:
            return GOT_STALE
        if not self.got:
            return GOT_NOT_RUN
        values = {s.value for s in self.got.values()}
        return values.pop() if len(values) == 1 else ", ".join(GOT_GATE.format(gate=g, status=s.value) for g, s in self.got.items())


def selftest(
    key: str,
    source: Source,
    project_root: Path,
    build_dir: Path,
    profile: str,
    faults_file: Path | None,
    only: Sequence[str],
    say: Callable[[str], None],
    jobs: int = 0,
    keep: bool = False,
    timeout: float = defaults.FAULT_TIMEOUT,
    failing: Mapping[str, str] | None = None,
    released: Released | None = None,
) -> tuple[GateResult, str]:
    """Every fault of ``profile`` planted and judged: the gate's result, and the table (fault, gate, expected, got,
    seconds, first problem). Faults are independent builds, so ``jobs`` of them (0: a fault per 4 cores) rebuild and
    run at once; a fault's run still going after ``timeout`` seconds is ended, its whole tree with it, and is not as
    expected; each copy is removed once judged, unless ``keep``. ``failing`` names the gates that already fail the
    unplanted build (gate -> why): a fault judged by one of them proves nothing and is not planted."""
    started = time.monotonic()
    every = load_faults(faults_file)
    faults = [f for f in every if profile in f.profiles and (not only or f.id in only)]
    if only and len(faults) != len(set(only)):
        known = [f.id for f in every]
        raise ConfigError(f"--fault: {', '.join(sorted(set(only) - {f.id for f in faults}))}: not a fault for profile {profile} (faults: {', '.join(known)})")
    if not faults:
        raise ConfigError(f"{faults_file or 'ci/gates/' + FAULTS}: no fault for profile {profile}")
    if jobs < 0:
        raise ConfigError(f"--jobs {jobs}: must be 0 (a fault per 4 cores) or more")
    if not timeout > 0:
        raise ConfigError(FAULT_TIMEOUT_NOT_POSITIVE.format(timeout=timeout))
    root = project_root / "build" / "selftest" / profile
    fixes = {f.gate: f for f in every if f.fixes and profile in f.profiles}  # each gate's fix the pin lacks (--fault or not)
    tree = functools.cache(lambda: Git(source.gitdir, source.workdir).write_tree())  # the checkout's, written once if read
    if fixes and failing and source is not None:
        # only a fix the checkout (pin + series) still lacks is the way out: on Vulkan at c14872f + the offset patch,
        # equivalence fails for another reason (the MTP leg) and the self-test had said to carry the patch carried already
        there = files_at(source.gitdir, tree(), [f.file for f in fixes.values()])
        fixes = {g: f for g, f in fixes.items() if (there.get(f.file) or "").count(f.search) == 1}
    outcomes: dict[str, Outcome] = {}
    for fault in faults:
        if (why := unjudged(fault, failing or {})) is not None:
            blocked = tuple(g for g in fault.gates if g in (failing or {}))
            why = NOT_JUDGED_NEXT.format(why=why, steps="; ".join(next_step(g, fixes.get(g), profile) for g in blocked))
            say(FAULT_SAYS.format(fault=fault.id, what=why))
            outcomes[fault.id] = Outcome(fault, {}, why, 0.0, blocked_by=blocked)
    to_plant = [f for f in faults if f.id not in outcomes]
    texts = files_at(source.gitdir, tree(), [f.file for f in to_plant]) if to_plant else {}
    trials: list[Trial] = []
    for fault in to_plant:
        why = stale(fault, texts[fault.file])
        if why is not None:
            carried = carried_fix(fault, texts[fault.file], source, faults_file)
            say(FAULT_SAYS.format(fault=fault.id, what=carried or why))
            outcomes[fault.id] = Outcome(fault, {}, carried or why, 0.0, stale=True, carried=carried == SERIES_CARRIES_FIX)
            continue
        trials.append(plant(source.workdir, build_dir, fault, root))
        say(f"gate_selftest: {fault.id}: planted in {fault.file}; it will rebuild and run {', '.join(fault.gates)}")
    width = jobs or max(1, min(len(trials), (os.cpu_count() or 1) // CORES_PER_FAULT))
    if len(trials) > 1:
        say(f"gate_selftest: {len(trials)} faults, {width} at a time")
    for trial, code, output, seconds, timed_out in _run_all(project_root, profile, trials, faults_file, width, timeout, released):
        o = _outcome(trial.fault, trial, code, output, seconds, timeout if timed_out else None)
        outcomes[trial.fault.id] = o
        say(f"gate_selftest: {o.fault.id}: {o.got_text} ({'as expected' if o.ok else 'NOT as expected'}) in {o.seconds:.1f} s (rebuild {o.rebuild:.1f} s)")
        if not keep:
            for copy in (trial.src, trial.build):
                shutil.rmtree(copy, ignore_errors=True)
    ordered = [outcomes[f.id] for f in faults]
    result = _result(key, ordered, time.monotonic() - started, width)
    after = fix_passed_lines(ordered)
    for fix, line in after:
        say(FAULT_SAYS.format(fault=fix, what=line))
    result = dataclasses.replace(result, problems=(*result.problems, *(f"{fix}: {line}" for fix, line in after)))
    which = (("faults_sha256", faults_sha256(faults)), ("faults_file", str(faults_file) if faults_file else f"ci/gates/selftest/{FAULTS}"))
    return dataclasses.replace(result, properties=(*result.properties, *which)), table(ordered)


def next_step(gate: str, fix: Fault | None, profile: str) -> str:
    """What makes ``gate`` pass the unplanted build, so that its faults are judged: the fix its fix-fault plants,
    carried as a patch of the series, or, with none, finding why it fails."""
    if fix is not None:
        return NEXT_CARRY_FIX.format(fix=fix.id, file=fix.file, profile=profile)
    return NEXT_FIND.format(gate=gate, profile=profile)


def carried_fix(fault: Fault, text: str | None, source: Source, faults_file: Path | None) -> str | None:
    """Why a fix-fault is stale when the fix is there (its search gone, its replacement in place): the series carries
    it (as it should), or the pin itself does (drop the fault); None for any other stale fault."""
    if not fault.fixes or text is None or fault.search in text or fault.replace not in text:
        return None
    at_pin = files_at(source.gitdir, source.commit, [fault.file]).get(fault.file)
    if at_pin is not None and fault.search not in at_pin and fault.replace in at_pin:
        return PIN_CARRIES_FIX.format(faults=faults_file or f"ci/gates/selftest/{FAULTS}")
    return SERIES_CARRIES_FIX


def fix_passed_lines(outcomes: Sequence[Outcome]) -> list[tuple[str, str]]:
    """After the run: each fix-fault that passed its gate planted while faults of that gate were not judged, and the
    step that gets them judged, as (the fix-fault's id, the line); pure."""
    lines = []
    for o in outcomes:
        if not (o.fault.fixes and o.ok and not o.carried and o.got):
            continue
        waiting = [x for x in outcomes if o.fault.gate in x.blocked_by]
        if waiting:
            lines.append((o.fault.id, FIX_PASSED_NEXT.format(gate=o.fault.gate, file=o.fault.file, count=len(waiting))))
    return lines


CORES_PER_FAULT = 4  # a fault's rebuild is one to a few units, and its gates want a core or two of their own


OWN_PREFIX = "ONEBIT_"  # this tool's own settings, which a fault's ci (this tool again) reads as the parent did
RELEASED_VAR = "ONEBIT_SELFTEST_RELEASED"  # the file of what a fault's gates compare with, written by the parent
RELEASED_FILE = "released.json"
Released = Mapping[str, Any]  # gate -> [the last release's pin, its record of the gate], or None


def released_from(path: Path) -> Callable[[str], tuple[str, Mapping[str, Any]] | None]:
    """In a fault's child: what each gate compares with, as the parent read it from the ledger (:data:`RELEASED_VAR`)."""
    found = load_json(path)

    def released(gate: str) -> tuple[str, Mapping[str, Any]] | None:
        entry = found.get(gate) if isinstance(found, dict) else None
        return (str(entry[0]), dict(entry[1])) if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], dict) else None

    return released


def child_environment(trial: Trial, released: Released | None) -> dict[str, str]:
    """A fault's child's environment: the one every program gets (never the ledger's key or witness: the parent signs),
    this tool's own settings (``ONEBIT_CMAKE_ARGS`` and the like: the child works out the same build), the release its
    gates compare with (a file: the child reads no signed ledger), and a fresh bytecode folder, so the fault's ci
    compiles from source."""
    given = {k: v for k, v in os.environ.items() if k.startswith(OWN_PREFIX) and k not in NEVER_PASSED}
    if released is not None:
        write_json(trial.work / RELEASED_FILE, dict(released))
        given[RELEASED_VAR] = str(trial.work / RELEASED_FILE)
    return tree_marked(with_bytecode(environment(given=given), process_bytecode()))


def _run_all(
    project_root: Path,
    profile: str,
    trials: Sequence[Trial],
    faults_file: Path | None,
    width: int,
    timeout: float = defaults.FAULT_TIMEOUT,
    released: Released | None = None,
) -> Iterator[tuple[Trial, int, str, float, bool]]:
    """Each trial's namespace run, ``width`` at a time, as each ends: (trial, exit status, output, seconds, whether
    it was ended at ``timeout``). On any exception (Ctrl-C included) every run still going is ended, its whole process
    tree with it."""
    pending = list(trials)
    running: dict[subprocess.Popen[bytes], tuple[Trial, float]] = {}
    try:
        while pending or running:
            while pending and len(running) < width:
                trial = pending.pop(0)
                argv = namespace_argv(project_root, profile, trial, faults_file)
                argv[0] = resolve(argv[0])
                env = child_environment(trial, released)
                with open_log(trial.work / "run.log", binary=True) as log:
                    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
                running[proc] = (trial, time.monotonic())
            late = [proc for proc, (_, t0) in running.items() if proc.poll() is None and time.monotonic() - t0 > timeout]
            for proc in late:
                end_tree(proc, grace=10.0)
            done = [proc for proc in running if proc.poll() is not None]
            for proc in done:
                trial, t0 = running.pop(proc)
                output = (trial.work / "run.log").read_text(encoding="utf-8", errors="replace")
                yield trial, int(proc.returncode), output, time.monotonic() - t0, proc in late
            if not done:
                time.sleep(0.1)
    finally:
        for proc in running:
            end_tree(proc, grace=10.0)


def _outcome(fault: Fault, trial: Trial, code: int, output: str, seconds: float, timed_out: float | None = None) -> Outcome:
    got: dict[str, Status] = {}
    problem = ""
    for gate in fault.gates:
        path = trial.out / f"{gate}.json"
        if not path.is_file():
            continue
        data = load_json(path)
        got[gate] = Status(data["status"])
        if not problem and data.get("problems") and (fault.wanted(gate) is not Status.PASSED or got[gate] is not Status.PASSED):
            problem = f"{gate}: {str(data['problems'][0]).splitlines()[0]}"
    if len(got) < len(fault.gates):
        tail = [ln for ln in output.strip().splitlines() if ln.strip()][-1:] or [f"exit status {code}"]
        if timed_out is not None:
            missing = ", ".join(g for g in fault.gates if g not in got)
            problem = ENDED_AT_TIMEOUT.format(timeout=timed_out, missing=missing, last=tail[0])
        else:
            problem = problem or f"the fault's run stopped before its gates finished: {tail[0]}"
    rebuild = float(load_json(trial.work / "rebuild.json")["seconds"]) if (trial.work / "rebuild.json").is_file() else 0.0
    return Outcome(fault, got, problem, seconds, rebuild)


def _result(key: str, outcomes: Sequence[Outcome], seconds: float, width: int = 1) -> GateResult:
    cases = []
    problems = []
    for o in outcomes:
        expected = "passed" if o.fault.expect is Status.PASSED else "caught"
        message = f"{o.fault.gate}: expected {o.fault.expect.value}, got {o.got_text}" + (f"; {o.problem}" if o.problem else "")
        status = Status.PASSED if o.ok else (Status.ERROR if o.stale or not o.got else Status.FAILED)
        cases.append(CaseResult(o.fault.id, status, message if not o.ok else "", classname=GATE, detail=f"{o.fault.why}; {expected}; {message}", seconds=o.seconds))
        if not o.ok:
            problems.append(f"{o.fault.id}: " + (o.problem if o.stale else message))
    # each edit counted once: a fix the pin lacks, else a benign edit (expected to pass), else a fault
    kinds = [("carried" if o.carried else "fix" if o.fault.fixes else "benign" if o.fault.expect is Status.PASSED else "fault", o.ok) for o in outcomes]
    ran, held = Counter(k for k, _ in kinds), Counter(k for k, ok in kinds if ok)
    status = Status.PASSED if all(o.ok for o in outcomes) else Status.FAILED
    slowest = max((o.seconds for o in outcomes), default=0.0)
    summary = SUMMARY.format(verdict=status.value.upper(), caught=held["fault"], faults=ran["fault"], benign=held["benign"], benigns=ran["benign"])
    summary += SUMMARY_FIXES.format(fixed=held["fix"], fixes=ran["fix"]) if ran["fix"] else ""
    summary += SUMMARY_CARRIED.format(carried=ran["carried"]) if ran["carried"] else ""
    summary += SUMMARY_TIMES.format(seconds=seconds, width=width) + (SUMMARY_SLOWEST.format(ratio=seconds / slowest, slowest=slowest) if slowest else "")
    metrics = tuple((f"{o.fault.id}.seconds", round(o.seconds, 1)) for o in outcomes) + tuple((f"{o.fault.id}.rebuild_seconds", o.rebuild) for o in outcomes)
    metrics += (("slowest_fault_seconds", round(slowest, 1)), ("parallel", width))
    return GateResult(GATE, status, summary, tuple(cases), tuple(problems), case_counts(cases), (("build_key", key),), metrics, seconds)


def table(outcomes: Sequence[Outcome]) -> str:
    rows = [("fault", "gate", "expected", "got", "seconds", "first problem")]
    for o in outcomes:
        gate = o.fault.gate + (MISSED_BY.format(gates=", ".join(o.fault.missed_by)) if o.fault.missed_by else "")
        expected = o.fault.expect.value + (MISSED_BY_PASSED.format(gates=", ".join(o.fault.missed_by)) if o.fault.missed_by else "")
        rows.append((o.fault.id, gate, expected, o.got_text + ("" if o.ok else " (!)"), f"{o.seconds:.1f}", o.problem))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows)
