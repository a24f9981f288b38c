"""``nox -s gate_selftest``: gates that prove they can fail. Known faults (faults.yaml) are planted, one at a time, in
a copy of the pinned fork (pin + series), built incrementally from the current build, and each gate must catch its
own fault and pass the benign edit.

For each fault that applies to the profile, nothing of the user's is touched: the checkout and the profile's build
directory are copied (``cp -a``: modification times kept) to ``build/selftest/<profile>/<fault>/``, the fault is
written into the copy, and then, in a mount namespace of its own (``unshare --mount``), the copies are bind-mounted
over the user's paths, so CMake and Ninja see the very paths they were configured with and rebuild only what the
fault touched (a one-file change rebuilt in 10 s where the whole cuda build took 587 s, on the H200). The gate runs
there too, on those binaries, and writes its result in the fault's directory.

A fault whose anchor no longer occurs exactly once at the pin is *stale*: reported by name, never skipped.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ci import defaults, places
from ci.command import end_tree, resolve, run
from ci.errors import ConfigError, ToolchainError
from ci.gates import names, registry
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.git import Git
from ci.places import id_problem, relative_problem
from ci.schema import Section, load_json, parse_yaml
from ci.source.sync import Source
from serve.bounded import CONFIG_LIMIT, is_regular, read_text

GATE = names.SELFTEST
FAULTS = "faults.yaml"
ALL = "all"

# Messages, shared with the tests that match on them (tests/support/messages.py)
FAULTS_UNREADABLE = "--faults {path}: cannot be read: {reason}"
NOT_A_GATE = '"{gate}" is not a gate: {known}'
NOT_A_FAULT_ID = '"{id}" is not a fault id ({why})'
NOT_ANOTHER_GATE = '"{gate}" is not another gate: {known}'
ID_TWICE = 'the id "{id}" is given twice'
NOT_A_FLAG = "is not true or false"
NOT_JUDGED = "not judged: {blocked}; make it pass first"  # each blocking gate a BLOCKED_BY, joined by "; "
BLOCKED_BY = "{gate} fails the unplanted build ({record})"
STALE_MISSING = "stale fault: {file} does not exist at the pin"
STALE_NO_MATCH = "stale fault: {file} has no match for {anchor!r}"
STALE_MATCHES = "stale fault: {file} has {count} matches for {anchor!r}; make the search unique"
STALE_LINE = "{fault}: {why}"  # bump_pin's report line of a stale fault (stale_lines), why a STALE_*
FAULT_TIMEOUT_NOT_POSITIVE = "--fault-timeout {timeout:g}: must be more than 0 seconds"
FAULT_SAYS = "gate_selftest: {fault}: {what}"
ENDED_AT_TIMEOUT = "ended after {timeout:g} s (--fault-timeout) before {missing} finished; its run's last line: {last}"
GOT_STALE = "stale"
GOT_NOT_RUN = "not run"
GOT_GATE = "{gate} {status}"  # a fault whose gates gave different verdicts: each gate's, joined by ", "
MISSED_BY = " (missed by {gates})"
MISSED_BY_PASSED = ", {gates} passed"
# the summary: SUMMARY, SUMMARY_FIXES when a fix the pin lacks ran, then SUMMARY_TIMES, then SUMMARY_SLOWEST when a fault ran
SUMMARY = "{verdict}: {caught}/{faults} faults caught by their gates, {benign}/{benigns} benign edits passed every gate"
SUMMARY_FIXES = ", {fixed}/{fixes} fixes the pin lacks passed their gates"
SUMMARY_TIMES = "; {seconds:.1f} s in all, {width} at a time"
SUMMARY_SLOWEST = ", {ratio:.2f}x the slowest fault ({slowest:.1f} s)"


@dataclass(frozen=True)
class Fault:
    id: str
    file: str
    search: str
    replace: str
    gate: str  # the gate that must catch it, or "all": every gate must pass
    expect: Status  # FAILED (caught) or PASSED (benign)
    profiles: tuple[str, ...]
    why: str
    missed_by: tuple[str, ...] = ()  # the older checks it gets past: each must pass with the fault planted
    fixes: bool = False  # the edit is a fix the pin lacks: its gate fails the unplanted build and must pass the planted one

    @property
    def gates(self) -> tuple[str, ...]:
        return registry.always() if self.gate == ALL else (self.gate, *self.missed_by)

    def wanted(self, gate: str) -> Status:
        """The verdict ``gate`` must give with this fault planted."""
        return Status.PASSED if gate in self.missed_by else self.expect

    def anchor(self) -> str:
        first = self.search.strip().splitlines()[0].strip() if self.search.strip() else self.search
        return first if len(first) <= 80 else first[:77] + "..."


def load_faults(path: Path | None = None) -> tuple[Fault, ...]:
    """faults.yaml (default: the committed ci/gates/faults.yaml), strictly."""
    if path is None:
        text, name = resources.files("ci.gates").joinpath(FAULTS).read_text(encoding="utf-8"), f"ci/gates/{FAULTS}"
    else:
        try:  # the user's file itself, never what a link points at
            text, name = read_text(path, CONFIG_LIMIT, follow=False), str(path)
        except OSError as exc:
            raise ConfigError(FAULTS_UNREADABLE.format(path=path, reason=exc.strerror)) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"--faults {path}: not UTF-8 text ({exc.reason})") from None
    top = Section(name, "", parse_yaml(text, name) or {})
    raw = top._get("faults", True)
    if not isinstance(raw, list) or not raw:
        raise top.error("is not a list of faults", "faults")
    faults: list[Fault] = []
    for i, item in enumerate(raw):
        s = Section(name, f"faults[{i}]", item)
        gate = s.string("gate")
        known = (*registry.plantable(), ALL)
        if gate not in known:
            raise s.error(NOT_A_GATE.format(gate=gate, known=", ".join(known)), "gate")
        expect = s.string("expect")
        if expect not in ("failed", "error", "passed"):
            raise s.error(f'"{expect}" is not failed or error (caught) nor passed (benign)', "expect")
        fault_id = s.string("id")
        if (why := id_problem(fault_id)) is not None:
            raise s.error(NOT_A_FAULT_ID.format(id=fault_id, why=why), "id")
        fault = Fault(
            id=fault_id,
            file=s.string("file"),
            search=s.string("search"),
            replace=s.string("replace"),
            gate=gate,
            expect=Status(expect),
            profiles=s.strings("profiles"),
            why=s.string("why"),
            missed_by=s.strings("missed_by", required=False),
            fixes=_flag(s, "fixes"),
        )
        for j, other in enumerate(fault.missed_by):
            if other not in known or other in (ALL, gate):
                raise s.error(NOT_ANOTHER_GATE.format(gate=other, known=", ".join(g for g in known if g not in (ALL, gate))), f"missed_by[{j}]")
        s.done()
        if (why := relative_problem(fault.file)) is not None:
            raise s.error(f'"{fault.file}": {why}', "file")
        if fault.search == fault.replace:
            raise s.error("search and replace are the same: that plants nothing")
        if fault.id in {f.id for f in faults}:
            raise s.error(ID_TWICE.format(id=fault.id), "id")
        faults.append(fault)
    top.done()
    return tuple(faults)


def unjudged(fault: Fault, failing: Mapping[str, str]) -> str | None:
    """Why ``fault`` is not planted: a gate it is judged by fails the unplanted build already (``failing``: gate ->
    which record), so a caught fault would prove nothing and a benign edit would raise the pin's own alarm. A fault
    that ``fixes`` what the pin lacks is judged all the same: that failure is its premise."""
    blocked = [g for g in fault.gates if g in failing and not fault.fixes]
    if not blocked:
        return None
    return NOT_JUDGED.format(blocked="; ".join(BLOCKED_BY.format(gate=g, record=failing[g]) for g in blocked))


def _flag(s: Section, name: str) -> bool:
    value = s._get(name, False)
    if value is not True and value is not False and s.has(name):
        raise s.error(NOT_A_FLAG, name)
    return value is True


def faults_sha256(faults: Sequence[Fault]) -> str:
    """The sha256 of a fault set, by content and in id order: the self-test record carries it, and ship counts only a
    record of the committed faults of its profile (a user's one-fault file, or ``--fault`` picking one, judged less)."""
    import hashlib
    import json

    # every field that changes a verdict: missed_by names gates that must pass planted, fixes flips the premise
    body = [[f.id, f.file, f.search, f.replace, f.gate, f.expect.value, list(f.missed_by), f.fixes] for f in sorted(faults, key=lambda f: f.id)]
    return hashlib.sha256(json.dumps(body).encode()).hexdigest()


def committed_faults_sha256(profile: str) -> str:
    return faults_sha256([f for f in load_faults() if profile in f.profiles])


def stale(fault: Fault, text: str | None) -> str | None:
    """Why ``fault`` no longer applies to ``text`` (the file at pin + series; None: no such file), or None."""
    if text is None:
        return STALE_MISSING.format(file=fault.file)
    n = text.count(fault.search)
    if n == 0:
        return STALE_NO_MATCH.format(file=fault.file, anchor=fault.anchor())
    if n > 1:
        return STALE_MATCHES.format(file=fault.file, count=n, anchor=fault.anchor())
    return None


def files_at(gitdir: Path, tree: str, paths: Sequence[str]) -> dict[str, str | None]:
    """The text of each path in ``tree`` of the fork store (None where the tree has no such file)."""
    git = Git(gitdir)
    out: dict[str, str | None] = {}
    for path in dict.fromkeys(paths):
        done = git.run("cat-file", "-p", f"{tree}:{path}", check=False)
        out[path] = done.output if done.returncode == 0 else None
    return out


def stale_lines(gitdir: Path, tree: str) -> list[str]:
    """bump_pin's report: each committed fault that no longer applies at ``tree``, as "id: why"."""
    faults = load_faults()
    texts = files_at(gitdir, tree, [f.file for f in faults])
    return [STALE_LINE.format(fault=f.id, why=why) for f in faults if (why := stale(f, texts[f.file])) is not None]


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
    """Copy the checkout and the build (modification times kept), and write the fault into the copy."""
    if (why := id_problem(fault.id)) is not None:
        raise ConfigError(f"fault {fault.id!r}: not a fault id ({why})")
    root.mkdir(parents=True, exist_ok=True)
    trial = Trial(fault, places.inside(root, root / fault.id, f"fault {fault.id}: its directory"))
    shutil.rmtree(trial.work, ignore_errors=True)
    trial.work.mkdir(parents=True)
    for src, dst in ((checkout, trial.src), (build_dir, trial.build)):
        run(["cp", "-a", "--reflink=auto", str(src), str(dst)], what=f"cp -a {src.name}")
    if (why := relative_problem(fault.file)) is not None:
        raise ConfigError(f"fault {fault.id}: file {fault.file}: {why}")
    target = places.inside(trial.src, trial.src / fault.file, f"fault {fault.id}: file")
    if not is_regular(trial.src / fault.file):
        raise ConfigError(f"fault {fault.id}: file {fault.file}: not a regular file in the fork (a link or a directory); plant faults in a file of its own")
    text = read_text(target, CONFIG_LIMIT * 4)
    why = stale(fault, text)
    if why is not None:
        raise ConfigError(why)
    target.write_text(text.replace(fault.search, fault.replace), encoding="utf-8")
    return trial


def namespace_argv(project_root: Path, profile: str, trial: Trial, faults: Path | None) -> list[str]:
    """``unshare --mount`` around this program's ``selftest-fault``: root may mount; others map themselves to root."""
    if shutil.which("unshare") is None:
        raise ToolchainError("gate_selftest: unshare (util-linux) not found on PATH; it gives each fault a mount namespace of its own")
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare.append("--map-root-user")
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

    @property
    def ok(self) -> bool:
        if self.stale or set(self.got) != set(self.fault.gates):  # a run that stopped early judged only part of it
            return False
        return all(s is self.fault.wanted(g) for g, s in self.got.items())

    @property
    def got_text(self) -> str:
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
) -> tuple[GateResult, str]:
    """Every fault of ``profile`` planted and judged: the gate's result, and the table (fault, gate, expected, got,
    seconds, first problem). Faults are independent builds, so ``jobs`` of them (0: a fault per 4 cores) rebuild and
    run at once; a fault's run still going after ``timeout`` seconds is ended, its whole tree with it, and is not as
    expected; each copy is removed once judged, unless ``keep``. ``failing`` names the gates that already fail the
    unplanted build (gate -> why): a fault judged by one of them proves nothing and is not planted."""
    started = time.monotonic()
    faults = [f for f in load_faults(faults_file) if profile in f.profiles and (not only or f.id in only)]
    if only and len(faults) != len(set(only)):
        known = [f.id for f in load_faults(faults_file)]
        raise ConfigError(f"--fault: {', '.join(sorted(set(only) - {f.id for f in faults}))}: not a fault for profile {profile} (faults: {', '.join(known)})")
    if not faults:
        raise ConfigError(f"{faults_file or 'ci/gates/' + FAULTS}: no fault for profile {profile}")
    if jobs < 0:
        raise ConfigError(f"--jobs {jobs}: must be 0 (a fault per 4 cores) or more")
    if not timeout > 0:
        raise ConfigError(FAULT_TIMEOUT_NOT_POSITIVE.format(timeout=timeout))
    root = project_root / "build" / "selftest" / profile
    outcomes: dict[str, Outcome] = {}
    for fault in faults:
        if (why := unjudged(fault, failing or {})) is not None:
            say(FAULT_SAYS.format(fault=fault.id, what=why))
            outcomes[fault.id] = Outcome(fault, {}, why, 0.0)
    to_plant = [f for f in faults if f.id not in outcomes]
    texts = files_at(source.gitdir, Git(source.gitdir, source.workdir).write_tree(), [f.file for f in to_plant]) if to_plant else {}
    trials: list[Trial] = []
    for fault in to_plant:
        why = stale(fault, texts[fault.file])
        if why is not None:
            say(FAULT_SAYS.format(fault=fault.id, what=why))
            outcomes[fault.id] = Outcome(fault, {}, why, 0.0, stale=True)
            continue
        trials.append(plant(source.workdir, build_dir, fault, root))
        say(f"gate_selftest: {fault.id}: planted in {fault.file}; it will rebuild and run {', '.join(fault.gates)}")
    width = jobs or max(1, min(len(trials), (os.cpu_count() or 1) // CORES_PER_FAULT))
    if len(trials) > 1:
        say(f"gate_selftest: {len(trials)} faults, {width} at a time")
    for trial, code, output, seconds, timed_out in _run_all(project_root, profile, trials, faults_file, width, timeout):
        o = _outcome(trial.fault, trial, code, output, seconds, timeout if timed_out else None)
        outcomes[trial.fault.id] = o
        say(f"gate_selftest: {o.fault.id}: {o.got_text} ({'as expected' if o.ok else 'NOT as expected'}) in {o.seconds:.1f} s (rebuild {o.rebuild:.1f} s)")
        if not keep:
            for copy in (trial.src, trial.build):
                shutil.rmtree(copy, ignore_errors=True)
    ordered = [outcomes[f.id] for f in faults]
    result = _result(key, ordered, time.monotonic() - started, width)
    which = (("faults_sha256", faults_sha256(faults)), ("faults_file", str(faults_file) if faults_file else f"ci/gates/{FAULTS}"))
    return dataclasses.replace(result, properties=(*result.properties, *which)), table(ordered)


CORES_PER_FAULT = 4  # a fault's rebuild is one to a few units, and its gates want a core or two of their own


def _run_all(
    project_root: Path, profile: str, trials: Sequence[Trial], faults_file: Path | None, width: int, timeout: float = defaults.FAULT_TIMEOUT
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
                with (trial.work / "run.log").open("wb") as log:
                    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
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
    kinds = [("fix" if o.fault.fixes else "benign" if o.fault.expect is Status.PASSED else "fault", o.ok) for o in outcomes]
    ran, held = Counter(k for k, _ in kinds), Counter(k for k, ok in kinds if ok)
    status = Status.PASSED if all(o.ok for o in outcomes) else Status.FAILED
    slowest = max((o.seconds for o in outcomes), default=0.0)
    summary = SUMMARY.format(verdict=status.value.upper(), caught=held["fault"], faults=ran["fault"], benign=held["benign"], benigns=ran["benign"])
    summary += SUMMARY_FIXES.format(fixed=held["fix"], fixes=ran["fix"]) if ran["fix"] else ""
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
