"""``nox -s bump_pin``: move the pin. A pure plan (what would change, and whether it is allowed: the fork store's
relation of the two commits, the series classified at the new one) and a runner that applies it all or nothing."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import logging
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from ci.commands import given, say
from ci.commands.build import build
from ci.commands.job import SESSION_COMMAND, Job, source_of
from ci.compile.cmake import BuildRequest
from ci.compile.profiles import DEFAULT_PROFILE
from ci.compile.stage import CurrentBuild
from ci.errors import ConfigError, GitError, OnebitError, Refused, ToolchainError
from ci.files import all_or_nothing, shown, write_atomic
from ci.gates.selftest.run import stale_lines
from ci.git import is_checked_out
from ci.pin import pins as pins_mod
from ci.pin.project import GITLINK_MODE, Project, find_project, read_gitmodules, set_gitmodules_value
from ci.pin.verify import verify
from ci.release import compile_record
from ci.source import sync
from ci.source.classify import PatchVerdict, SeriesPlan, classify
from ci.source.op_cases import OpCount, accept, against, counts_at, report_lines
from ci.source.series import PATCHES_DIR, SERIES_FILE, Series, check_paths, load_series, series_text
from ci.source.store import ForkStore, Move, Relation
from ci.words import count, listed

log = logging.getLogger("onebit-ci")

SUBJECTS_SHOWN = 20

# Messages, shared with the tests that match on them (tests/support/messages.py)
ALREADY_PINNED = "pin is already {new} ({reference}) on {branch}: nothing to do"
MOVED = "{old} -> {new} ({old_reference} -> {reference}), {how}, on {branch}"
HOW_AHEAD = "{commits} ahead"
HOW_ROLLBACK = "ROLLBACK: {commits} behind"
HOW_SIDEWAYS = "SIDEWAYS: {ahead} ahead, {behind} behind"
HOW_UNRELATED = "the old pin is not in this fork's history"
HEADLINE = "bump_pin: {headline}"
SUBJECT = "{sha} {subject}"
LISTED = "  {line}"
SERIES_AT = "bump_pin: patch series at {commit}:"
DROPPED_LINE = "  {patch}: already upstream, dropped from the series"
STALE_FAULT = "bump_pin: {fault}; re-aim it in the same PR"
EMPTY_OPTION = "{flag} is empty; give a value, or leave {flag} out for pins.yaml's"
# a bump that is not a step forward on the pinned branch of the pinned fork: every reason in one refusal, then the one
# command that does it anyway (before, a move to another fork took three refusals in a row)
BUMP_REFUSED = "bump refused: {reasons}"
IF_MEANT = "; if this is meant: {command}"
NO_BRANCH_HAS_IT = "; pin a commit of {branch}"
NEXT_BUMP = "nox -s bump_pin -- {args}"
NOT_ON_BRANCH = "commit {commit} is not on the pinned branch {branch} ({where})"
BRANCH_ABSENT = "this fork has no branch {branch}, the pinned one ({where})"
ONLY_ON = "it is only on {branches}"
ON_NO_BRANCH = "no branch reaches it"
WHY_ROLLBACK = "{new} is an ancestor of the current pin {old} ({commits} back)"
WHY_SIDEWAYS = "{new} is neither ahead of nor behind the current pin {old}"
WHY_UNRELATED = "the current pin {old} is not in this fork, so {new} cannot be shown to be ahead"
ANOTHER_FORK = "it came from {remote}, likely another fork than {current}: --url records the fork that has it"
URL_PLACEHOLDER = "https://FORK-URL"  # a local mirror cannot say where its fork lives: the person fills it in
BRANCHES_NAMED = 5
CONFLICTS_REFUSED = "bump refused: the series conflicts at {commit}: {listing}; refresh the patch (docs/patches.md) and retry"
CONFLICT_ITEM = "patches/{patch}: {detail}"
UPSTREAM_REFUSED = "bump refused: already upstream at {commit}: {listing}; pass --drop-upstreamed to drop it in this bump"
UPSTREAM_ITEM = "patches/{patch} ({detail})"
INDEX_UNWRITABLE = "{index}: cannot be written ({error}); is another git running?"
REPORT_TITLE = "## Bump the ROCmFPX pin: {old} -> {new}"
REPORT_SUBJECT = "- `{line}`"
REPORT_VERDICT = "- `{patch}`: {fate}"
REPORT_DETAIL = " ({detail})"
REPORT_DROPPED = "- `{patch}`: {fate}, dropped from the series by this bump ({detail})"
STALE_FAULTS_HEADING = "### Stale gate_selftest faults"
REPORT_FAULT = "- {fault}"
COUNT_LINE = "bump_pin: test-backend-ops {op}: {line}"  # pins.yaml's count against the pin's (ci.source.op_cases)
COUNTS_DIFFER_NEXT = "bump_pin: the counts differ: {command} writes the pin's, or confirm pins.yaml's on the device (nox -s gpu_tests) before this lands"
COMPILE_HEADING = "## Compile ({profile})"
NO_COMPILE_VERDICT = "bump_pin: no {profile} compile verdict: {reason}"
COMPILE_SAID = "bump_pin: {profile} compile {verdict}"
COMPILED_IN = "passed: {profile} compiled in {seconds:.1f} s"
BUILD_KEY = " (build key {key}{up_to_date})"
NEXT = "bump_pin: next: {gates}, then git commit -F {report}"
NOT_HERE = "nox -s {sessions} on a machine with the {profile} toolchain"
UP_TO_DATE = ", up to date"


@dataclass(frozen=True)
class BumpRequest:
    target: str
    branch: str | None = None
    allow_rollback: bool = False
    reference: str | None = None
    drop_upstreamed: bool = False
    today: dt.date = field(default_factory=dt.date.today)
    url: str | None = None  # --url: the fork the new pin is on, recorded in pins.yaml and .gitmodules
    remote: str | None = None  # --remote: where the new commit was fetched from (a URL or a local mirror)
    accept_counts: bool = False  # --accept-counts: pins.yaml takes the new pin's test-backend-ops counts where they differ


@dataclass(frozen=True)
class BumpPlan:
    """Everything a bump will write, computed before anything is written."""

    pins: pins_mod.Pins
    old: str
    new: str
    branch: str
    move: Move
    subjects: tuple[tuple[str, str], ...]
    pins_text: str
    gitmodules_text: str | None
    reference: str
    url: str
    date: str
    series: Series
    series_plan: SeriesPlan | None  # the series against the new commit
    dropped_verdicts: tuple[PatchVerdict, ...] = ()  # patches already upstream, removed from the series by this bump
    series_text: str | None = None
    checkout: sync.SyncPlan | None = None  # how the checkout follows, when there is one
    stale_faults: tuple[str, ...] = ()  # gate_selftest's faults that no longer apply at the new pin, each with why
    counts: tuple[OpCount, ...] = ()  # each expect.backend_ops op's cases in the new pin's own test program
    accepted: tuple[str, ...] = ()  # the ops whose count pins.yaml takes from the pin (--accept-counts)

    @property
    def dropped(self) -> tuple[str, ...]:
        return tuple(v.patch for v in self.dropped_verdicts)

    @property
    def unchanged(self) -> bool:
        return self.move.relation is Relation.SAME and self.branch == self.pins.fork.branch and self.url == self.pins.fork.url

    def headline(self) -> str:
        old, new = self.old[:7], self.new[:7]
        if self.move.relation is Relation.SAME:
            return ALREADY_PINNED.format(new=new, reference=self.pins.fork.reference, branch=self.branch)
        how = {
            Relation.AHEAD: HOW_AHEAD.format(commits=count(self.move.ahead, "commit")),
            Relation.ROLLBACK: HOW_ROLLBACK.format(commits=count(self.move.behind, "commit")),
            Relation.SIDEWAYS: HOW_SIDEWAYS.format(ahead=self.move.ahead, behind=self.move.behind),
            Relation.UNRELATED: HOW_UNRELATED,
        }[self.move.relation]
        return MOVED.format(old=old, new=new, old_reference=self.pins.fork.reference, reference=self.reference, how=how, branch=self.branch)

    def subject_lines(self) -> list[str]:
        lines = [SUBJECT.format(sha=sha, subject=subject) for sha, subject in self.subjects[:SUBJECTS_SHOWN]]
        rest = len(self.subjects) - SUBJECTS_SHOWN
        if rest > 0:
            lines.append(f"... and {rest} more")
        return lines

    def report(self) -> str:
        fork = self.pins.fork
        lines = [
            REPORT_TITLE.format(old=self.old[:7], new=self.new[:7]),
            "",
            f"- Fork: {self.url}, branch `{self.branch}`" + (f" (was {fork.url})" if self.url != fork.url else ""),
            f"- From: `{self.old}` ({fork.reference}, pinned {fork.date})",
            f"- To: `{self.new}` ({self.reference}, pinned {self.date})",
            f"- Move: {self.headline()}",
            "",
        ]
        if self.subjects:
            lines += [f"### Commits ({len(self.subjects)})", ""]
            lines += [REPORT_SUBJECT.format(line=s) if s.startswith("...") is False else f"- {s}" for s in self.subject_lines()]
            lines.append("")
        if self.series_plan is not None:
            lines += [f"### Patch series ({count(len(self.series.patches), 'patch')})", ""]
            lines += [
                REPORT_VERDICT.format(patch=v.patch, fate=v.fate.value) + (REPORT_DETAIL.format(detail=v.detail) if v.detail else "")
                for v in self.series_plan.verdicts
            ]
            lines += [REPORT_DROPPED.format(patch=v.patch, fate=v.fate.value, detail=v.detail) for v in self.dropped_verdicts]
            lines.append("")
        if self.stale_faults:
            lines += [STALE_FAULTS_HEADING, "", "Re-aim them in this PR (ci/gates/selftest/faults.yaml; docs/gates.md):", ""]
            lines += [REPORT_FAULT.format(fault=line) for line in self.stale_faults]
            lines.append("")
        if self.counts:
            lines += report_lines(self.pins, self.counts, self.accepted)
            lines += ["", "The counts belong to the pin: confirm them with `nox -s gpu_tests` before this lands.", ""]
        return "\n".join(lines)

    def count_line(self, found: OpCount) -> str:
        return against(self.pins.expected_cases()[found.op], found, found.op in self.accepted)

    @property
    def counts_differ(self) -> bool:
        said = self.pins.expected_cases()
        return any(c.cases is not None and c.cases != said[c.op] and c.op not in self.accepted for c in self.counts)


def plan(project: Project, pins: pins_mod.Pins, store: ForkStore, request: BumpRequest) -> BumpPlan:
    for flag, value in (("--branch", request.branch), ("--reference", request.reference)):
        if value is not None and not value.strip():  # "" was taken as "not given": an unset variable bumped silently
            raise ConfigError(EMPTY_OPTION.format(flag=flag))
    branch = request.branch or pins.fork.branch
    head = request.target.lower() == "head"  # the tip of the branch, for the scheduled bump that follows the fork (docs/ci.md)
    if head and branch not in store.branches():
        try:
            store.branch_tip(branch)
        except GitError as exc:
            fix = _next_bump(request, branch=store.branches()[0]) if store.branches() else ""
            raise GitError(exc.message + (IF_MEANT.format(command=fix) if fix else "")) from None
    commit = store.resolve(str(store.branch_tip(branch)) if head else request.target)
    new = str(commit.id)
    old = pins.fork.commit
    move = store.move(old, new)
    _refuse_unless_forward(store, pins, request, branch, new, move)
    url = fork_url(pins.fork.url, request, move.relation)
    reference = request.reference or (pins.fork.reference if move.relation is Relation.SAME else f"{branch}@{new[:7]}")
    date = pins.fork.date if move.relation is Relation.SAME else request.today.isoformat()
    changes = {"commit": new, "reference": reference, "date": date}
    if branch != pins.fork.branch:
        changes["branch"] = branch
    if url != pins.fork.url:
        changes["url"] = url
    moved = move.relation is not Relation.SAME or "branch" in changes or "url" in changes
    pins_text = pins_mod.edit_fork(pins.text, changes) if moved else pins.text
    # the new pin's own count of each op, read from its test program before anything is built or gated
    counts = tuple(counts_at(store.repo, new, list(pins.expected_cases())).values()) if move.relation is not Relation.SAME else ()
    accepted: tuple[str, ...] = ()
    if request.accept_counts:
        pins_text, accepted = accept(pins, pins_text, counts, new, request.today.isoformat())
    gitmodules_text = None
    if branch != pins.fork.branch or url != pins.fork.url:
        sub = read_gitmodules(project.gitmodules_path).get(pins.submodule)
        if sub is None:
            raise Refused(f".gitmodules: no submodule at {pins.submodule}; run nox -s verify_pin")
        gitmodules_text = project.gitmodules_path.read_text()
        for key, value, old_value in (("branch", branch, pins.fork.branch), ("url", url, pins.fork.url)):
            if value != old_value:
                gitmodules_text = set_gitmodules_value(gitmodules_text, sub.name, key, value)
    subjects = tuple(store.subjects_between(old, new)) if move.relation is not Relation.SAME else ()
    series = load_series(project.root / PATCHES_DIR)
    series_plan, dropped, series_file = _series_at(project, store, series, old, commit, request)
    follow = None
    if move.relation is not Relation.SAME and is_checked_out(project.root / pins.submodule):
        # decided now, so that a checkout holding someone's work refuses the bump before anything is written
        source = dataclasses.replace(source_of(project, pins, series.without([v.patch for v in dropped])), commit=new)
        follow = sync.prepare(source, store, series_plan=series_plan)
    return BumpPlan(
        pins=pins,
        old=old,
        new=new,
        branch=branch,
        move=move,
        subjects=subjects,
        pins_text=pins_text,
        gitmodules_text=gitmodules_text,
        reference=reference,
        url=url,
        date=date,
        series=series,
        series_plan=series_plan,
        dropped_verdicts=dropped,
        series_text=series_file,
        checkout=follow,
        counts=counts,
        accepted=accepted,
    )


def _refuse_unless_forward(store: ForkStore, pins: pins_mod.Pins, request: BumpRequest, branch: str, new: str, move: Move) -> None:
    """Refuse a bump that is not a step forward on the pinned branch of the pinned fork, naming every reason at once
    and the one command that makes it anyway (the branch that has the commit, main first; --url; --allow-rollback)."""
    reasons: list[str] = []
    fix: dict[str, str] = {}
    absent = branch not in store.branches()
    if absent or not store.on_branch(new, branch):
        elsewhere = store.branches_containing(new)
        where = ONLY_ON.format(branches=listed(elsewhere, BRANCHES_NAMED)) if elsewhere else ON_NO_BRANCH
        reasons.append(BRANCH_ABSENT.format(branch=branch, where=where) if absent else NOT_ON_BRANCH.format(commit=new[:12], branch=branch, where=where))
        branches = [b for b in elsewhere if not b.startswith("pull/")]  # a pull request's head is no branch to pin
        if not branches:
            raise Refused(BUMP_REFUSED.format(reasons="; ".join(reasons)) + NO_BRANCH_HAS_IT.format(branch=branch))
        fix["branch"] = branches[0]
    old = pins.fork.commit
    if move.relation is Relation.UNRELATED and request.url is None and request.remote is not None and not request.remote.startswith("https://"):
        reasons.append(ANOTHER_FORK.format(remote=request.remote, current=pins.fork.url))
        fix["url"] = URL_PLACEHOLDER
    if move.relation in (Relation.ROLLBACK, Relation.SIDEWAYS, Relation.UNRELATED) and not request.allow_rollback:
        reasons.append({
            Relation.ROLLBACK: WHY_ROLLBACK.format(new=new[:12], old=old[:12], commits=count(move.behind, "commit")),
            Relation.SIDEWAYS: WHY_SIDEWAYS.format(new=new[:12], old=old[:12]),
            Relation.UNRELATED: WHY_UNRELATED.format(new=new[:12], old=old[:12]),
        }[move.relation])  # fmt: skip
        fix["allow_rollback"] = ""
    if reasons:
        raise Refused(BUMP_REFUSED.format(reasons="; ".join(reasons)) + IF_MEANT.format(command=_next_bump(request, **fix)))


def _next_bump(request: BumpRequest, branch: str | None = None, url: str | None = None, allow_rollback: str | None = None) -> str:
    """The bump command of ``request`` again, with the flags a refusal found missing."""
    args = [request.target]
    for flag, value in (("--remote", request.remote), ("--branch", branch or request.branch), ("--url", url or request.url), ("--reference", request.reference)):
        if value is not None:
            args += [flag, shlex.quote(value)]
    args += ["--allow-rollback"] if allow_rollback is not None or request.allow_rollback else []
    args += ["--drop-upstreamed"] if request.drop_upstreamed else []
    args += ["--accept-counts"] if request.accept_counts else []
    return NEXT_BUMP.format(args=" ".join(args))


def fork_url(current: str, request: BumpRequest, relation: Relation) -> str:
    """The fork URL to record for the new pin: ``--url``; else an https ``--remote`` it was fetched from; else the
    current one (a local mirror of another fork was refused before, naming ``--url``)."""
    if request.url is not None:
        problem = pins_mod.check_url(request.url)
        if problem:
            raise Refused(f'--url "{request.url}" {problem}; give the fork\'s https:// URL')
        return request.url
    remote = request.remote
    if remote is not None and remote.startswith("https://"):
        return remote
    return current


def _series_at(
    project: Project, store: ForkStore, series: Series, old: str, commit: pygit2.Commit, request: BumpRequest
) -> tuple[SeriesPlan | None, tuple[PatchVerdict, ...], str | None]:
    """Classify the series against the new commit; refuse a conflict, and an upstreamed patch unless dropped."""
    if not series.patches:
        return None, (), None
    new = str(commit.id)
    check_paths(series, commit.tree, None)
    gitdir = Path(store.repo.path)
    sp = classify(gitdir, new, series, since=old)
    if sp.conflicts:
        listing = "; ".join(CONFLICT_ITEM.format(patch=v.patch, detail=v.detail) for v in sp.conflicts)
        raise Refused(CONFLICTS_REFUSED.format(commit=new[:12], listing=listing))
    dropped = sp.upstreamed
    if dropped and not request.drop_upstreamed:
        listing = "; ".join(UPSTREAM_ITEM.format(patch=v.patch, detail=v.detail) for v in sp.upstreamed)
        raise Refused(UPSTREAM_REFUSED.format(commit=new[:12], listing=listing))
    text = None
    if dropped:
        series_path = project.root / PATCHES_DIR / SERIES_FILE
        kept = series.without([v.patch for v in dropped])
        text = series_text(kept.names, series_path.read_text())
        sp = classify(gitdir, new, kept, since=old)
    return sp, dropped, text


def execute(project: Project, bump: BumpPlan) -> None:
    """Write pins.yaml, .gitmodules, the series, the gitlink and the checkout; on any failure restore them all."""
    patches_dir = project.root / PATCHES_DIR
    targets = [project.pins_path, project.gitmodules_path, project.index_path(), patches_dir / SERIES_FILE]
    targets += [patches_dir / name for name in bump.dropped]
    with all_or_nothing(targets):
        write_atomic(project.pins_path, bump.pins_text)
        if bump.gitmodules_text is not None:
            write_atomic(project.gitmodules_path, bump.gitmodules_text)
        if bump.series_text is not None:
            write_atomic(patches_dir / SERIES_FILE, bump.series_text)
            for name in bump.dropped:
                (patches_dir / name).unlink()
        repo = project.repo()
        index = repo.index
        index.read()
        try:
            index.add(pygit2.IndexEntry(bump.pins.submodule, pygit2.Oid(hex=bump.new), GITLINK_MODE))
            index.add(pins_mod.PINS_FILE)
            if bump.gitmodules_text is not None:
                index.add(".gitmodules")
            if bump.dropped:
                index.add(f"{PATCHES_DIR}/{SERIES_FILE}")
                for name in bump.dropped:
                    if f"{PATCHES_DIR}/{name}" in index:
                        index.remove(f"{PATCHES_DIR}/{name}")
            index.write()
        except pygit2.GitError as exc:
            raise GitError(INDEX_UNWRITABLE.format(index=project.index_path(), error=exc)) from None
        if bump.checkout is not None:
            sync.execute(bump.checkout)


def write_report(path: Path, bump: BumpPlan) -> None:
    write_atomic(path, bump.report())


@dataclass(frozen=True)
class BumpOutcome:
    plan: BumpPlan
    report: Path | None  # None when nothing changed


StaleCheck = Callable[[Path, str], list[str]]  # (fork store, tree) -> "fault: why" lines


def run(project: Project, request: BumpRequest, report: Path | None, stale: StaleCheck | None = None) -> BumpOutcome:
    """``nox -s bump_pin``: the current pin must verify; fetch; plan; write everything or nothing; the report."""
    check = verify(project)
    if not check.ok or check.pins is None:
        raise Refused("the current pin does not verify; fix it first: " + "; ".join(check.problems))
    pins = check.pins
    store = ForkStore.open(project.module_gitdir(pins.submodule))
    where = request.remote or pins.fork.url
    log.info("fetching %s", where)
    log.info("fetched %s", store.sync(where))
    bump = plan(project, pins, store, request)
    if bump.unchanged:
        return BumpOutcome(bump, None)
    if stale is not None:
        tree = bump.series_plan.tree if bump.series_plan is not None else str(store.tree_of(bump.new).id)
        bump = dataclasses.replace(bump, stale_faults=tuple(stale(Path(store.repo.path), tree)))
    execute(project, bump)
    path = report or project.root / "build" / "bump-report.md"
    write_report(path, bump)
    return BumpOutcome(bump, path)


def session(project: Project, request: BumpRequest, report: Path | None, say: Callable[[str], None], stale: StaleCheck | None = None) -> int:
    """``nox -s bump_pin -- SHA``: what moves, the series at the new pin, the counts against the pin's own, then
    everything written (or nothing)."""
    done = run(project, request, report, stale)
    bump = done.plan
    say(HEADLINE.format(headline=bump.headline()))
    for line in bump.subject_lines():
        say(LISTED.format(line=line))
    for found in bump.counts:
        say(COUNT_LINE.format(op=found.op, line=bump.count_line(found)))
    if bump.counts_differ:
        say(COUNTS_DIFFER_NEXT.format(command=_next_bump(dataclasses.replace(request, target=bump.new[:12], accept_counts=True))))
    if bump.series_plan is not None:
        say(SERIES_AT.format(commit=bump.new[:7]))
        for v in bump.series_plan.verdicts:
            say(LISTED.format(line=v.line()))
        for name in bump.dropped:
            say(DROPPED_LINE.format(patch=name))
    if done.report is None:
        return 0
    if bump.checkout is not None:
        say(bump.checkout.describe())
    for line in bump.stale_faults:
        say(STALE_FAULT.format(fault=line))
    say(f"bump_pin: wrote pins.yaml and the gitlink (staged); report: {shown(done.report, project.root)}")
    return 0


def main(args: argparse.Namespace) -> int:
    request = BumpRequest(
        args.commit, args.branch, args.allow_rollback, args.reference, args.drop_upstreamed, url=args.url, remote=args.remote, accept_counts=args.accept_counts
    )
    # the project alone: the current pin's problems are the bump's first check (verify), each named
    project = find_project(Path(args.root) if args.root else None)
    code = session(project, request, given(args.report), say, stale_lines)
    report = given(args.report) or project.root / "build" / "bump-report.md"
    if code == 0 and report.is_file():
        job = Job.resolve(project.root, session="build")  # pins.yaml as bumped, read once
        if not args.no_compile:  # a compile verdict for the new pin (issue 23)
            compile_verdict(job, report, say, remote=args.remote)
        say(NEXT.format(gates=next_gates(job), report=shown(report, project.root)))
    return code


def next_gates(job: Job) -> str:
    """The command that builds and gates the new pin on this machine: the default profile's where its toolchain is,
    else one this machine can build."""
    sessions = "build gpu_tests"
    if DEFAULT_PROFILE in job.buildable():
        return f"nox -s {sessions}"
    here = job.suggested_profile()
    return SESSION_COMMAND.format(sessions=sessions, profile=here) if here else NOT_HERE.format(sessions=sessions, profile=DEFAULT_PROFILE)


def compile_verdict(job: Job, report: Path, say: Callable[[str], None], profile: str = "gfx1151", remote: str | None = None) -> str | None:
    """After a bump: compile ``profile`` at the new pin when its toolchain is here, and add the verdict to the bump
    report (``## Compile``). None, and the report untouched, when the toolchain is not here."""
    try:
        job.toolchain(job.profile(profile))
    except ToolchainError as exc:
        say(NO_COMPILE_VERDICT.format(profile=profile, reason=exc.message.splitlines()[0]))
        return None
    started = time.monotonic()
    try:
        outcome = build(job, BuildRequest(profile=profile, remote=remote), say)
    except OnebitError as exc:
        verdict = f"failed after {time.monotonic() - started:.1f} s: {exc.message.splitlines()[0]}"
    else:
        built = CurrentBuild(outcome.manifest, outcome.plan.build_dir)
        if outcome.plan.profile.backend == "hip":
            verdict = f"passed: {compile_record.result(built).summary}"
        else:
            verdict = COMPILED_IN.format(profile=profile, seconds=outcome.manifest.seconds)
        verdict += BUILD_KEY.format(key=outcome.manifest.key[:12], up_to_date=UP_TO_DATE if outcome.up_to_date else "")
    text = report.read_text(encoding="utf-8") if report.is_file() else ""
    write_atomic(report, text.rstrip("\n") + f"\n\n{COMPILE_HEADING.format(profile=profile)}\n\n{verdict}\n")
    say(COMPILE_SAID.format(profile=profile, verdict=verdict))
    return verdict

