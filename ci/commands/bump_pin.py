"""``nox -s bump_pin``: move the pin. A pure plan (what would change, and whether it is allowed: the fork store's
relation of the two commits, the series classified at the new one) and a runner that applies it all or nothing."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from ci.commands import given, say
from ci.commands.build import build
from ci.commands.job import Job, source_of
from ci.compile.cmake import BuildRequest
from ci.compile.stage import CurrentBuild
from ci.errors import GitError, OnebitError, Refused, ToolchainError
from ci.files import all_or_nothing, shown, write_atomic
from ci.gates.selftest import stale_lines
from ci.git import is_checked_out
from ci.pin import pins as pins_mod
from ci.pin.project import GITLINK_MODE, Project, find_project, read_gitmodules, set_gitmodules_value
from ci.pin.verify import verify
from ci.release import compile_record
from ci.source import sync
from ci.source.classify import PatchVerdict, SeriesPlan, classify
from ci.source.series import PATCHES_DIR, SERIES_FILE, Series, check_paths, load_series, series_text
from ci.source.store import ForkStore, Move, Relation
from ci.words import count

log = logging.getLogger("onebit-ci")

SUBJECTS_SHOWN = 20


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

    @property
    def dropped(self) -> tuple[str, ...]:
        return tuple(v.patch for v in self.dropped_verdicts)

    @property
    def unchanged(self) -> bool:
        return self.move.relation is Relation.SAME and self.branch == self.pins.fork.branch and self.url == self.pins.fork.url

    def headline(self) -> str:
        old, new = self.old[:7], self.new[:7]
        if self.move.relation is Relation.SAME:
            return f"pin is already {new} ({self.pins.fork.reference}) on {self.branch}: nothing to do"
        how = {
            Relation.AHEAD: f"{count(self.move.ahead, 'commit')} ahead",
            Relation.ROLLBACK: f"ROLLBACK: {count(self.move.behind, 'commit')} behind",
            Relation.SIDEWAYS: f"SIDEWAYS: {self.move.ahead} ahead, {self.move.behind} behind",
            Relation.UNRELATED: "the old pin is not in this fork's history",
        }[self.move.relation]
        return f"{old} -> {new} ({self.pins.fork.reference} -> {self.reference}), {how}, on {self.branch}"

    def subject_lines(self) -> list[str]:
        lines = [f"{sha} {subject}" for sha, subject in self.subjects[:SUBJECTS_SHOWN]]
        rest = len(self.subjects) - SUBJECTS_SHOWN
        if rest > 0:
            lines.append(f"... and {rest} more")
        return lines

    def report(self) -> str:
        fork = self.pins.fork
        lines = [
            f"## Bump the ROCmFPX pin: {self.old[:7]} -> {self.new[:7]}",
            "",
            f"- Fork: {self.url}, branch `{self.branch}`" + (f" (was {fork.url})" if self.url != fork.url else ""),
            f"- From: `{self.old}` ({fork.reference}, pinned {fork.date})",
            f"- To: `{self.new}` ({self.reference}, pinned {self.date})",
            f"- Move: {self.headline()}",
            "",
        ]
        if self.subjects:
            lines += [f"### Commits ({len(self.subjects)})", ""]
            lines += [f"- `{s}`" if s.startswith("...") is False else f"- {s}" for s in self.subject_lines()]
            lines.append("")
        if self.series_plan is not None:
            lines += [f"### Patch series ({count(len(self.series.patches), 'patch')})", ""]
            lines += [f"- `{v.patch}`: {v.fate.value}" + (f" ({v.detail})" if v.detail else "") for v in self.series_plan.verdicts]
            lines += [f"- `{v.patch}`: {v.fate.value}, dropped from the series by this bump ({v.detail})" for v in self.dropped_verdicts]
            lines.append("")
        if self.stale_faults:
            lines += ["### Stale gate_selftest faults", "", "Re-aim them in this PR (ci/gates/faults.yaml; docs/gates.md):", ""]
            lines += [f"- {line}" for line in self.stale_faults]
            lines.append("")
        expected = self.pins.expected_cases()
        if expected:
            lines += ["### Gate expectations carried over", ""]
            lines += [f"- test-backend-ops `{op}`: {n} cases" for op, n in expected.items()]
            lines += ["", "The counts belong to the pin: confirm them with `nox -s gpu_tests` before this lands.", ""]
        return "\n".join(lines)


def plan(project: Project, pins: pins_mod.Pins, store: ForkStore, request: BumpRequest) -> BumpPlan:
    branch = request.branch or pins.fork.branch
    # "head": the tip of the branch, for the scheduled bump that follows the fork (docs/ci.md)
    commit = store.resolve(str(store.branch_tip(branch)) if request.target.lower() == "head" else request.target)
    new = str(commit.id)
    if not store.on_branch(new, branch):
        elsewhere = store.branches_containing(new)
        where = f"it is only on {', '.join(elsewhere[:5])}" if elsewhere else "no branch reaches it"
        raise Refused(f"commit {new[:12]} is not on the pinned branch {branch} ({where}); pin a commit of {branch}")
    old = pins.fork.commit
    move = store.move(old, new)
    if move.relation in (Relation.ROLLBACK, Relation.SIDEWAYS, Relation.UNRELATED) and not request.allow_rollback:
        why = {
            Relation.ROLLBACK: f"{new[:12]} is an ancestor of the current pin {old[:12]} ({count(move.behind, 'commit')} back)",
            Relation.SIDEWAYS: f"{new[:12]} is neither ahead of nor behind the current pin {old[:12]}",
            Relation.UNRELATED: f"the current pin {old[:12]} is not in this fork, so {new[:12]} cannot be shown to be ahead",
        }[move.relation]
        raise Refused(f"bump refused: {why}; pass --allow-rollback if this is meant")
    url = fork_url(pins.fork.url, request, move.relation, new)
    reference = request.reference or (pins.fork.reference if move.relation is Relation.SAME else f"{branch}@{new[:7]}")
    date = pins.fork.date if move.relation is Relation.SAME else request.today.isoformat()
    changes = {"commit": new, "reference": reference, "date": date}
    if branch != pins.fork.branch:
        changes["branch"] = branch
    if url != pins.fork.url:
        changes["url"] = url
    moved = move.relation is not Relation.SAME or "branch" in changes or "url" in changes
    pins_text = pins_mod.edit_fork(pins.text, changes) if moved else pins.text
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
    )


def fork_url(current: str, request: BumpRequest, relation: Relation, new: str) -> str:
    """The fork URL to record for the new pin: ``--url``; else an https ``--remote`` it was fetched from; else the
    current one, unless the new pin is not in the current pin's history and came from a local mirror, which cannot
    say where the fork lives: that is refused, naming ``--url``."""
    if request.url is not None:
        problem = pins_mod.check_url(request.url)
        if problem:
            raise Refused(f'--url "{request.url}" {problem}; give the fork\'s https:// URL')
        return request.url
    remote = request.remote
    if remote is not None and remote.startswith("https://"):
        return remote
    if remote is not None and relation is Relation.UNRELATED:
        raise Refused(
            f"bump refused: {new[:12]} came from {remote} and the current pin is not in its history, so it is likely another fork "
            f"than {current}; give --url https://... for the fork that has it (recorded in pins.yaml and .gitmodules), or --url {current} to keep this one"
        )
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
        listing = "; ".join(f"patches/{v.patch}: {v.detail}" for v in sp.conflicts)
        raise Refused(f"bump refused: the series conflicts at {new[:12]}: {listing}; refresh the patch (docs/patches.md) and retry")
    dropped = sp.upstreamed
    if dropped and not request.drop_upstreamed:
        listing = "; ".join(f"patches/{v.patch} ({v.detail})" for v in sp.upstreamed)
        raise Refused(f"bump refused: already upstream at {new[:12]}: {listing}; pass --drop-upstreamed to drop it in this bump")
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
            raise GitError(f"{project.index_path()}: cannot be written ({exc}); is another git running?") from None
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
    """``nox -s bump_pin -- SHA``: what moves, the series at the new pin, then everything written (or nothing)."""
    done = run(project, request, report, stale)
    bump = done.plan
    say(f"bump_pin: {bump.headline()}")
    for line in bump.subject_lines():
        say(f"  {line}")
    if bump.series_plan is not None:
        say(f"bump_pin: patch series at {bump.new[:7]}:")
        for v in bump.series_plan.verdicts:
            say(f"  {v.line()}")
        for name in bump.dropped:
            say(f"  {name}: already upstream, dropped from the series")
    if done.report is None:
        return 0
    if bump.checkout is not None:
        say(bump.checkout.describe())
    for line in bump.stale_faults:
        say(f"bump_pin: {line}; re-aim it in the same PR")
    rel = shown(done.report, project.root)
    say(f"bump_pin: wrote pins.yaml and the gitlink (staged); report: {rel}")
    say(f"bump_pin: next: nox -s build gpu_tests, then git commit -F {rel}")
    return 0


def main(args: argparse.Namespace) -> int:
    request = BumpRequest(args.commit, args.branch, args.allow_rollback, args.reference, args.drop_upstreamed, url=args.url, remote=args.remote)
    # the project alone: the current pin's problems are the bump's first check (verify), each named
    project = find_project(Path(args.root) if args.root else None)
    code = session(project, request, given(args.report), say, stale_lines)
    report = given(args.report) or project.root / "build" / "bump-report.md"
    if code == 0 and not args.no_compile and report.is_file():  # a compile verdict for the new pin (issue 23)
        compile_verdict(Job.resolve(project.root), report, say, remote=args.remote)  # pins.yaml as bumped, read once
    return code


def compile_verdict(job: Job, report: Path, say: Callable[[str], None], profile: str = "gfx1151", remote: str | None = None) -> str | None:
    """After a bump: compile ``profile`` at the new pin when its toolchain is here, and add the verdict to the bump
    report (``## Compile``). None, and the report untouched, when the toolchain is not here."""
    try:
        job.toolchain(job.profile(profile))
    except ToolchainError as exc:
        say(f"bump_pin: no {profile} compile verdict: {exc.message.splitlines()[0]}")
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
            verdict = f"passed: {profile} compiled in {outcome.manifest.seconds:.1f} s"
        verdict += f" (build key {outcome.manifest.key[:12]}{', up to date' if outcome.up_to_date else ''})"
    text = report.read_text(encoding="utf-8") if report.is_file() else ""
    write_atomic(report, text.rstrip("\n") + f"\n\n## Compile ({profile})\n\n{verdict}\n")
    say(f"bump_pin: {profile} compile {verdict}")
    return verdict

