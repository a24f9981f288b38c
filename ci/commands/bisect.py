"""``nox -s bisect``: when a bump fails a gate, name the fork commit that broke it.

``git bisect --no-checkout`` chooses each commit in the fork store; each step brings the checkout to that commit + the
series (:func:`ci.source.sync.sync`), builds it incrementally and runs the one gate: a pass is ``good``, a failure
``bad``, anything else ``skip`` with its reason. Each step's record goes to the ledger under ``bisect:<build key>``,
which no build has, so ship never counts it. At the end, on a failure and on Ctrl-C or SIGTERM, the bisection is reset
and the checkout put back at the pin + series.
"""
from __future__ import annotations

import argparse
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from ci.commands import absolute, job_of, say
from ci.commands.backend_ops import expectations
from ci.commands.gpu_tests import under_test, watched_run
from ci.commands.job import Job
from ci.compile.cmake import BuildRequest
from ci.compile.stage import current_build, run_build
from ci.errors import CommandFailed, ConfigError, OnebitError, Refused
from ci.files import shown, write_atomic
from ci.gates import registry
from ci.gates.protocol import Gate
from ci.gates.results import GateResult, Status
from ci.gates.target import GateOptions
from ci.git import Git
from ci.pin.pins import EquivalenceConfig
from ci.pin.verify import verify
from ci.processes import signals_ignored, sigterm_as_interrupt
from ci.release import ledger, records, standings
from ci.release.figures import BISECT_PREFIX
from ci.source.classify import classify
from ci.source.store import ForkStore, Relation
from ci.source.sync import Source, ensure_commit, execute, prepare
from ci.words import count, listed

KEY_PREFIX = BISECT_PREFIX  # the ledger's build key of a step: never a build's key, so ship never counts it
BUMP_REPORT = Path("build") / "bump-report.md"
_TO_RE = re.compile(r"^- To: `([0-9a-f]{40})`", re.MULTILINE)
_FROM_RE = re.compile(r"^- From: `([0-9a-f]{40})`", re.MULTILINE)
_FIRST_BAD_RE = re.compile(r"^([0-9a-f]{40}) is the first bad commit$", re.MULTILINE)
_ONLY_SKIPPED = "There are only 'skip'ped commits left to test."

# Messages, shared with the tests that match on them (tests/support/messages.py)
# the run, line by line
START = "bisect: {gate} on {profile}, {good} (good) .. {bad} (bad): {commits}, about {steps}"
STEP_START = "bisect: step {step} (of about {expected}): {commit} {subject}"
STEP_DONE = "bisect: step {step}: {result}"
STEP_RESULT = "{commit} {outcome}: {reason} [{times}]"
PUT_BACK = "bisect: the checkout is back at the pin {commit} + the series"
# the end: the headline and what follows it
FOUND = "bisect: {commit} is the first bad commit for {gate} ({subject}), {steps}, {seconds:.1f} s"
ONLY_SKIPPED_LEFT = "bisect: only skipped commits left; the first bad commit for {gate} is one of {commits} ({steps}, {seconds:.1f} s)"
STOPPED = "bisect: stopped after {steps} (--max-steps) with {left} left: {commits}"
FIRST_BAD_FILES = "  files: {files}"
FIRST_BAD_PROBLEM = "  {gate}: {problem}"
LAST_GOOD_LINE = "  last good: {commit} {subject}"
# why a step is a skip
INCONCLUSIVE_STEP = "{gate} inconclusive after re-measuring with more rounds: {summary}"
SERIES_DOES_NOT_APPLY = "the series does not apply: {problems}"  # SeriesPlan.not_applying()
# the report (markdown)
FIRST_BAD_HEADING = "**First bad commit: `{sha}`** {subject}"
FILES_TOUCHED = "Files touched: {files}"
PROBLEM_ITEM = "- {problem}"
ONLY_SKIPPED_SECTION = "Only skipped commits are left; the first bad commit is one of:"
CANDIDATE_ITEM = "- `{sha}` {subject}"
STOPPED_SECTION = "Stopped by --max-steps with {left} left: {commits}"
LAST_GOOD = "Last good: `{sha}` {subject}: {reason}"
LEDGER_LINE = " (ledger line {line})"
STEP_ROW = "| {step} | `{commit}` {subject} | {verdict} | {build:.1f} | {gate:.1f} | {total:.1f} | {why} |"
LOG_BLOCK = "<details><summary>git bisect log</summary>\n\n```\n{log}\n```\n\n</details>"
# refusals
REPORT_NOT_UTF8 = "{report}: not UTF-8 text (byte 0x{byte:02x}); give the report bump_pin wrote, or --good and --bad"
NO_BAD = "no --bad given and no bump report at {report} names a target (- To: `SHA`); give --bad SHA"
NOT_ANCESTOR = "--good {good} is not an ancestor of --bad {bad} ({relation}); give a good commit older than the bad one"
NO_GATE = "no --gate given and the ledger has no failed gate record for profile {profile}; give --gate {gates}"  # gates: the registry's, joined by "|"
UNDER_WAY = "a git bisect is already under way in {name}'s store; end it with git -C {name} bisect reset, then retry"
GOOD_END_FAILS = "--check-good: the good end {commit} is {outcome} for {gate} ({reason}); give an older --good"
# the good end came from the bump report (no --good; the pin is the bump's To) and is no good end here: after a bump
# across forks its From is the old fork's commit, and the default bisect had failed on it without saying where it came from
REPORT_NOT_ANCESTOR = "{good} is not an ancestor of {bad} ({relation})"  # FROM_BUMP_REPORT's problem: no --good was given
FROM_BUMP_REPORT = (
    "{problem} (the good end is the From of {report}: From {start}, To {target}; after a bump to another fork that is "
    "the old fork's commit); give --good SHA, a commit of this fork's history where the gate passes"
)
MAX_STEPS_TOO_FEW = "--max-steps {max_steps}: must be 1 or more"
REPORT_WRITTEN = "bisect: report for the bump PR: {report}; the {profile} build dir now holds the last step's build (nox -s build brings it back to the pin)"


class Outcome(Enum):
    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"


@dataclass(frozen=True)
class BisectRequest:
    profile: str
    good: str | None = None  # default: the pin (or, when the pin is already the bump's target, the bump's start)
    bad: str | None = None  # default: the bump report's target
    gate: str | None = None  # default: the newest failed ledger record of the profile at the bad end
    remote: str | None = None
    max_steps: int | None = None
    check_good: bool = False
    bump_report: Path | None = None
    out: Path | None = None  # the markdown report (default build/bisect/report.md)
    expect: tuple[tuple[str, int], ...] = ()  # --expect OP=N: the backend_ops counts of the range, over the pin's
    options: GateOptions = field(default_factory=GateOptions)


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    files: tuple[str, ...] = ()

    @property
    def short(self) -> str:
        return self.sha[:7]


@dataclass(frozen=True)
class Step:
    number: int  # 0: the --check-good step
    commit: Commit
    outcome: Outcome
    reason: str  # the gate's summary, or why it was skipped
    problems: tuple[str, ...] = ()
    build_seconds: float = 0.0
    gate_seconds: float = 0.0
    seconds: float = 0.0
    build_key: str = ""
    ledger_line: int | None = None

    def line(self) -> str:
        times = f"{self.seconds:.1f} s (build {self.build_seconds:.1f} s, gate {self.gate_seconds:.1f} s)"
        return STEP_RESULT.format(commit=self.commit.short, outcome=self.outcome.value, reason=self.reason, times=times)


@dataclass(frozen=True)
class BisectAnswer:
    gate: str
    profile: str
    good: str
    bad: str
    commits: int
    expected: int
    steps: tuple[Step, ...]
    first_bad: Commit | None = None
    candidates: tuple[Commit, ...] = ()  # only skipped commits left: the first bad is one of these
    left: tuple[str, ...] = ()  # --max-steps reached: the commits still in range
    log: str = ""
    seconds: float = 0.0

    @property
    def found(self) -> bool:
        return self.first_bad is not None

    def step_at(self, sha: str) -> Step | None:
        return next((s for s in reversed(self.steps) if s.commit.sha == sha), None)

    @property
    def last_good(self) -> Step | None:
        """The good step nearest the first bad commit (its parent, when it was tested)."""
        good = [s for s in self.steps if s.outcome is Outcome.GOOD]
        return good[-1] if good else None

    def headline(self) -> str:
        steps = count(len([s for s in self.steps if s.number > 0]), "step")
        if (first_bad := self.first_bad) is not None:
            return FOUND.format(commit=first_bad.short, gate=self.gate, subject=first_bad.subject, steps=steps, seconds=self.seconds)
        if self.candidates:
            commits = ", ".join(c.short for c in self.candidates)
            return ONLY_SKIPPED_LEFT.format(gate=self.gate, commits=commits, steps=steps, seconds=self.seconds)
        return STOPPED.format(steps=steps, left=count(len(self.left), "commit"), commits=", ".join(s[:7] for s in self.left[:10]))


# -- pure parts: how many steps, what a gate's result means, what git bisect said ------------------------------------


def expected_steps(commits: int) -> int:
    """About log2 of the commits in range (git bisect's own "roughly N steps")."""
    return math.ceil(math.log2(commits)) if commits > 1 else 0


def outcome_of(result: GateResult) -> tuple[Outcome, str]:
    """A pass is good; a failure bad; a gate that could not judge (ERROR, SKIPPED) skips. A case still inconclusive
    (a perf check, after the gate's own re-measurement with more rounds) skips too, unless another case fails outright."""
    if result.status is Status.PASSED:
        return Outcome.GOOD, result.summary
    if result.status is not Status.FAILED:
        return Outcome.SKIP, f"{result.gate} could not judge: {result.summary}"
    decisive = [c for c in result.cases if c.status is Status.FAILED and not c.inconclusive]
    if not decisive and any(c.inconclusive for c in result.cases):
        return Outcome.SKIP, INCONCLUSIVE_STEP.format(gate=result.gate, summary=result.summary)
    return Outcome.BAD, result.summary


@dataclass(frozen=True)
class GitSaid:
    first_bad: str | None = None
    only_skipped: tuple[str, ...] = ()  # the commits the first bad could be


def parse_bisect(output: str) -> GitSaid:
    m = _FIRST_BAD_RE.search(output)
    if m:
        return GitSaid(first_bad=m.group(1))
    if _ONLY_SKIPPED in output:
        return GitSaid(only_skipped=tuple(re.findall(r"^([0-9a-f]{40})$", output, re.MULTILINE)))
    return GitSaid()


def bump_ends(text: str) -> tuple[str | None, str | None]:
    """(From, To) of a bump report (build/bump-report.md)."""
    start, to = _FROM_RE.search(text), _TO_RE.search(text)
    return (start.group(1) if start else None, to.group(1) if to else None)


def markdown(answer: BisectAnswer) -> str:
    """The report to paste into the bump PR."""
    lines = [f"### Bisect: {answer.gate} on {answer.profile}, {answer.good[:7]}..{answer.bad[:7]}", ""]
    ran = len([s for s in answer.steps if s.number])
    lines += [f"{answer.commits} commits in range, about {answer.expected} steps expected; {ran} run in {answer.seconds:.1f} s.", ""]
    if answer.first_bad is not None:
        fb = answer.first_bad
        lines += [FIRST_BAD_HEADING.format(sha=fb.sha, subject=fb.subject), ""]
        if fb.files:
            lines += [FILES_TOUCHED.format(files=listed([f"`{f}`" for f in fb.files], 20)), ""]
        step = answer.step_at(fb.sha)
        if step is not None:
            lines += [f"The gate there: {step.reason}"]
            lines += [*(PROBLEM_ITEM.format(problem=p.splitlines()[0] if p else p) for p in step.problems[:5]), ""]
    elif answer.candidates:
        lines += [ONLY_SKIPPED_SECTION, ""]
        lines += [*(CANDIDATE_ITEM.format(sha=c.sha, subject=c.subject) for c in answer.candidates), ""]
    else:
        lines += [STOPPED_SECTION.format(left=count(len(answer.left), "commit"), commits=", ".join(f"`{s[:7]}`" for s in answer.left[:20])), ""]
    good = answer.last_good
    if good is not None:
        ledger_line = LEDGER_LINE.format(line=good.ledger_line) if good.ledger_line else ""
        lines += [LAST_GOOD.format(sha=good.commit.sha, subject=good.commit.subject, reason=good.reason) + ledger_line, ""]
    lines += ["| step | commit | verdict | build s | gate s | total s | why |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in answer.steps:
        n = "check-good" if s.number == 0 else str(s.number)
        why = s.reason.replace("|", "\\|").replace("\n", " ")
        subject = s.commit.subject.replace("|", "/")
        times = {"build": s.build_seconds, "gate": s.gate_seconds, "total": s.seconds}
        lines.append(STEP_ROW.format(step=n, commit=s.commit.short, subject=subject, verdict=s.outcome.value, why=why, **times))
    if answer.log:
        lines += ["", LOG_BLOCK.format(log=answer.log.rstrip())]
    return "\n".join(lines) + "\n"


# -- the run ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """What the session resolved once: the ends, the gate, the fork store and the pin's source."""

    base: Job
    request: BisectRequest
    source: Source
    store: ForkStore
    good: str
    bad: str
    gate: Gate
    results: Path
    said_of_good: Callable[[str], str] = str  # a problem with the good end, said with where that end came from


def resolve(base: Job, request: BisectRequest, say: Callable[[str], None]) -> _Job:
    """Everything checked before the checkout is touched: the pin, the ends, their order, the gate, the checkout's state."""
    base.profile(request.profile)
    check = verify(base.project, base.pins, checkout_head=False)
    if not check.ok:
        raise Refused("the pin does not verify: " + "; ".join(check.problems) + "; run nox -s verify_pin")
    source = base.source()
    store = ensure_commit(source, request.remote, say)
    report = request.bump_report or base.root / BUMP_REPORT
    try:
        start, target = bump_ends(report.read_text(encoding="utf-8")) if report.is_file() else (None, None)
    except UnicodeDecodeError as exc:
        raise ConfigError(REPORT_NOT_UTF8.format(report=shown(report, base.root), byte=exc.object[exc.start])) from None
    if request.bad is None and target is None:
        raise ConfigError(NO_BAD.format(report=shown(report, base.root)))
    bad = str(store.resolve(request.bad).id) if request.bad else str(target)
    from_report = request.good is None and source.commit == bad and bool(start)
    good_spec = request.good or (start if from_report else source.commit)

    def said_of_good(problem: str) -> str:
        if not from_report:
            return problem
        return FROM_BUMP_REPORT.format(problem=problem, report=shown(report, base.root), start=str(start)[:12], target=str(target)[:12])

    try:
        good = str(store.resolve(good_spec).id) if good_spec else source.commit
    except OnebitError as exc:
        if not from_report:
            raise
        raise ConfigError(said_of_good(exc.message)) from None
    if not store.has_commit(bad):
        raise ConfigError(f"--bad {bad[:12]}: not in the fork store; pass --remote with a mirror that has it")
    relation = store.move(good, bad).relation
    if relation is not Relation.AHEAD:
        if from_report:
            raise ConfigError(said_of_good(REPORT_NOT_ANCESTOR.format(good=good[:7], bad=bad[:7], relation=relation.value)))
        raise ConfigError(NOT_ANCESTOR.format(good=good[:7], bad=bad[:7], relation=relation.value))
    gate = registry.select([request.gate or default_gate(base.root, request.profile, bad, base.pins.equivalence)], base.pins)[0]
    if (source.gitdir / "BISECT_START").exists():
        raise Refused(UNDER_WAY.format(name=source.name))
    prepare(source, store)  # refuses, untouched, a checkout holding changes this tool did not make
    results = ledger.default_results_dir(base.root)
    return _Job(base, request, source, store, good, bad, gate, results, said_of_good)


def default_gate(root: Path, profile: str, bad: str, release: EquivalenceConfig | None = None) -> str:
    """The gate that stands FAILED in the newest build of ``profile`` where one does (:func:`standings.standings`, the
    reading ship and the self-test ask; a run on models of one's own is none), at the bad end when one is there."""
    book = ledger.read(ledger.ledger_path(ledger.default_results_dir(root)), ledger.signing_key())
    mine = [r for r in book.records if r.data.get("profile") == profile and not r.build_key.startswith(KEY_PREFIX)]
    keys = list(dict.fromkeys(r.build_key for r in reversed(mine)))  # the newest build first
    at_bad = {r.build_key for r in mine if r.data.get("pin") == bad}
    for key in [k for k in keys if k in at_bad] + [k for k in keys if k not in at_bad]:
        failing = [s for s in standings.standings(book, key, registry.runnable(), release) if s.state is standings.Standing.FAILED and s.record]
        if failing:
            return max(failing, key=lambda s: s.record.line if s.record else 0).gate
    raise ConfigError(NO_GATE.format(profile=profile, gates="|".join(registry.runnable())))


def _commit(store: ForkStore, sha: str, files: bool = False) -> Commit:
    c = store.commit(sha)
    subject = c.message.splitlines()[0] if c.message else ""
    if not files:
        return Commit(sha, subject)
    diff = c.parents[0].tree.diff_to_tree(c.tree) if c.parents else c.tree.diff_to_tree(swap=True)
    return Commit(sha, subject, tuple(sorted({d.new_file.path for d in diff.deltas} | {d.old_file.path for d in diff.deltas})))


def step_job(base: Job, commit: str, expect: tuple[tuple[str, int], ...] = ()) -> Job:
    """The command's job with the pin moved to ``commit``: the step's source, build key and gate expectations
    (``expect``, when given, in place of pins.yaml's expect.backend_ops: the pin's counts need not hold in the range).
    The toolchain found once is kept."""
    pins = base.pins
    return replace(base, pins=replace(pins, fork=replace(pins.fork, commit=commit), backend_ops=expect or pins.backend_ops))


def run_step(job: _Job, number: int, sha: str, say: Callable[[str], None]) -> Step:
    """One commit: checkout + series, incremental build, the one gate, its record in the ledger."""
    t0 = time.monotonic()
    commit = _commit(job.store, sha)
    stepped = step_job(job.base, sha, job.request.expect)
    plan = classify(job.source.gitdir, sha, stepped.series)
    if not plan.clean:
        return Step(number, commit, Outcome.SKIP, SERIES_DOES_NOT_APPLY.format(problems=plan.not_applying()), seconds=time.monotonic() - t0)
    quiet: list[str] = []
    try:
        build_plan = stepped.build_plan(BuildRequest(job.request.profile))  # the step's key, derived once
        outcome = run_build(build_plan, stepped.source(), stepped.root, None, quiet.append)
    except OnebitError as exc:  # a build that failed, or one that could not start
        why = f"the build failed: {exc.message}" if isinstance(exc, CommandFailed) else f"could not build: {exc.message}"
        return Step(number, commit, Outcome.SKIP, why, build_seconds=time.monotonic() - t0, seconds=time.monotonic() - t0)
    t1 = time.monotonic()
    key = outcome.manifest.key
    out = job.results / f"{KEY_PREFIX[:-1]}-{key[:12]}"
    out.mkdir(parents=True, exist_ok=True)
    try:
        build = current_build(build_plan, stepped.root)
        result = watched_run(job.gate, under_test(stepped, build), job.request.options, out)
    except OnebitError as exc:
        t2 = time.monotonic()
        why = f"the gate could not run: {exc.message}"
        return Step(number, commit, Outcome.SKIP, why, build_seconds=t1 - t0, gate_seconds=t2 - t1, seconds=t2 - t0, build_key=key)
    t2 = time.monotonic()
    m = outcome.manifest
    context = ledger.BuildContext(KEY_PREFIX + key, sha, m.series_digest, m.profile, m.device)
    props = {"build_key": KEY_PREFIX + key, "profile": m.profile, "bisect": f"{job.good}..{job.bad}", "commit": sha}
    line = records.record(result, out, props, ledger_path=ledger.ledger_path(job.results), build=context, root=stepped.root)
    verdict, reason = outcome_of(result)
    return Step(number, commit, verdict, reason, result.problems, t1 - t0, t2 - t1, t2 - t0, key, line.line if line else None)


def _goods(git: Git) -> list[str]:
    return git.text("for-each-ref", "--format=%(objectname)", "refs/bisect/good-*").split()


def next_commit(git: Git, skipped: set[str]) -> str | None:
    """The untested commit nearest the middle of the range left. git bisect's own choice after a skip jumps far
    from the middle (on purpose, against runs of untestable commits); the neighbour of a skipped commit halves the
    range as well, which keeps a single untestable commit to one extra step."""
    for line in git.text("rev-list", "--bisect-all", "refs/bisect/bad", "--not", *_goods(git)).splitlines():
        sha = line.split()[0]
        if sha not in skipped:
            return sha
    return None


def put_back(job: _Job, git: Git, started: bool, say: Callable[[str], None]) -> None:
    """End the bisection and bring the checkout to the pin + series; Ctrl-C waits until this is done."""
    with signals_ignored():
        if started:
            git.run("bisect", "reset", check=False)
        execute(prepare(job.source, job.store))
        say(PUT_BACK.format(commit=job.source.short))


def bisect(job: _Job, say: Callable[[str], None]) -> BisectAnswer:
    t0 = time.monotonic()
    git = Git(job.source.gitdir, job.source.workdir)
    n = int(git.text("rev-list", "--count", f"{job.good}..{job.bad}"))
    expected = expected_steps(n)
    good, bad = job.good[:7], job.bad[:7]
    say(START.format(gate=job.gate.name, profile=job.request.profile, good=good, bad=bad, commits=count(n, "commit"), steps=count(expected, "step")))
    steps: list[Step] = []

    def show(step: Step, total: str) -> None:
        steps.append(step)
        say(STEP_DONE.format(step=total, result=step.line()))

    started = False
    answer: BisectAnswer | None = None
    with sigterm_as_interrupt():
        try:
            execute(prepare(job.source, job.store))  # HEAD at the pin, where git bisect starts from and ends at
            if job.request.check_good:
                say(f"bisect: re-proving the good end {job.good[:7]} first")
                first = run_step(job, 0, job.good, say)
                show(first, "check-good")
                if first.outcome is not Outcome.GOOD:
                    fails = GOOD_END_FAILS.format(commit=job.good[:7], outcome=first.outcome.value, gate=job.gate.name, reason=first.reason)
                    raise Refused(job.said_of_good(fails))
            said = git.run("bisect", "start", "--no-checkout", job.bad, job.good).output
            started = True
            number = 0
            skipped: set[str] = set()
            while True:
                result = parse_bisect(said)
                if result.first_bad or result.only_skipped:
                    break
                if job.request.max_steps is not None and number >= job.request.max_steps:
                    break
                number += 1
                sha = next_commit(git, skipped) or git.text("rev-parse", "BISECT_HEAD")
                say(STEP_START.format(step=number, expected=expected, commit=sha[:7], subject=_commit(job.store, sha).subject))
                step = run_step(job, number, sha, say)
                show(step, f"{number}/{expected}")
                if step.outcome is Outcome.SKIP:
                    skipped.add(sha)
                said = git.run("bisect", step.outcome.value, sha, check=False).output
            log = git.run("bisect", "log", check=False).output
            left: tuple[str, ...] = ()
            if not (result.first_bad or result.only_skipped):
                left = tuple(git.text("rev-list", "refs/bisect/bad", "--not", *_goods(git)).split())
            answer = BisectAnswer(
                job.gate.name, job.request.profile, job.good, job.bad, n, expected, tuple(steps),
                first_bad=_commit(job.store, result.first_bad, files=True) if result.first_bad else None,
                candidates=tuple(_commit(job.store, s) for s in result.only_skipped), left=left, log=log, seconds=time.monotonic() - t0,
            )  # fmt: skip
        finally:
            put_back(job, git, started, say)
    assert answer is not None  # every path that leaves the try without one raised
    return answer


def session(base: Job, request: BisectRequest, say: Callable[[str], None]) -> int:
    """``nox -s bisect``: 0 when the first bad commit is named, 1 otherwise (only skipped commits, --max-steps)."""
    if request.max_steps is not None and request.max_steps < 1:
        raise ConfigError(MAX_STEPS_TOO_FEW.format(max_steps=request.max_steps))
    job = resolve(base, request, say)
    answer = bisect(job, say)
    out = request.out or base.root / "build" / "bisect" / "report.md"
    write_atomic(out, markdown(answer))
    say(answer.headline())
    if answer.first_bad is not None:
        say(FIRST_BAD_FILES.format(files=", ".join(answer.first_bad.files[:10])) + (" ..." if len(answer.first_bad.files) > 10 else ""))
        step = answer.step_at(answer.first_bad.sha)
        if step is not None:
            for p in step.problems[:3]:
                say(FIRST_BAD_PROBLEM.format(gate=job.gate.name, problem=p.splitlines()[0] if p else p))
    if answer.last_good is not None:
        say(LAST_GOOD_LINE.format(commit=answer.last_good.commit.short, subject=answer.last_good.commit.subject))
    say(REPORT_WRITTEN.format(report=shown(out, base.root), profile=request.profile))
    return 0 if answer.found else 1


def main(args: argparse.Namespace) -> int:
    options = GateOptions(timeout=args.timeout, rounds=args.rounds)
    expect = tuple(expectations(args.expect).items())
    request = BisectRequest(
        args.profile, args.good, args.bad, args.gate, args.remote, args.max_steps, args.check_good,
        bump_report=absolute(args.bump_report), out=absolute(args.out), expect=expect, options=options,
    )  # fmt: skip
    return session(job_of(args), request, say)
