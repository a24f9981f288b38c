"""Moving the pin: a pure plan (what would change, and whether it is allowed) and a runner that applies it
all or nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from ci import pins as pins_mod
from ci.checkout import Checkout
from ci.errors import GitError, Refused
from ci.files import all_or_nothing, write_atomic
from ci.fork import ForkStore, Move, Relation
from ci.patches import (
    PATCHES_DIR,
    SERIES_FILE,
    Series,
    SeriesPlan,
    State,
    Verdict,
    apply_to_workdir,
    check_paths,
    checkout_state,
    classify,
    load_series,
    series_text,
)
from ci.project import GITLINK_MODE, Project, read_gitmodules, set_gitmodules_value
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
    date: str
    series: Series
    series_plan: SeriesPlan | None  # the series against the new commit
    dropped_verdicts: tuple[Verdict, ...] = ()  # patches already upstream, removed from the series by this bump
    series_text: str | None = None
    checkout: State | None = None  # the checkout's state before the bump, when there is one

    @property
    def dropped(self) -> tuple[str, ...]:
        return tuple(v.patch for v in self.dropped_verdicts)

    @property
    def kept_series(self) -> Series:
        return self.series.without(self.dropped)

    @property
    def unchanged(self) -> bool:
        return self.move.relation is Relation.SAME and self.branch == self.pins.fork.branch

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
            f"- Fork: {fork.url}, branch `{self.branch}`",
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
        expected = self.pins.expected_cases()
        if expected:
            lines += ["### Gate expectations carried over", ""]
            lines += [f"- test-backend-ops `{op}`: {n} cases" for op, n in expected.items()]
            lines += ["", "The counts belong to the pin: confirm them with `nox -s gpu_tests` before this lands.", ""]
        return "\n".join(lines)


def plan(project: Project, store: ForkStore, request: BumpRequest) -> BumpPlan:
    pins = project.load_pins()
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
    reference = request.reference or (pins.fork.reference if move.relation is Relation.SAME else f"{branch}@{new[:7]}")
    date = pins.fork.date if move.relation is Relation.SAME else request.today.isoformat()
    changes = {"commit": new, "reference": reference, "date": date}
    if branch != pins.fork.branch:
        changes["branch"] = branch
    pins_text = pins_mod.edit_fork(pins.text, changes) if move.relation is not Relation.SAME or changes.get("branch") else pins.text
    gitmodules_text = None
    if branch != pins.fork.branch:
        sub = read_gitmodules(project.gitmodules_path).get(pins.submodule)
        if sub is None:
            raise Refused(f".gitmodules: no submodule at {pins.submodule}; run nox -s verify_pin")
        gitmodules_text = set_gitmodules_value(project.gitmodules_path.read_text(), sub.name, "branch", branch)
    subjects = tuple(store.subjects_between(old, new)) if move.relation is not Relation.SAME else ()
    series = load_series(project.root / PATCHES_DIR)
    series_plan, dropped, series_file = _series_at(project, store, series, old, commit, request)
    state = _checkout_state(project, pins, store, series) if move.relation is not Relation.SAME else None
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
        date=date,
        series=series,
        series_plan=series_plan,
        dropped_verdicts=dropped,
        series_text=series_file,
        checkout=state,
    )


def _series_at(
    project: Project, store: ForkStore, series: Series, old: str, commit: pygit2.Commit, request: BumpRequest
) -> tuple[SeriesPlan | None, tuple[Verdict, ...], str | None]:
    """Classify the series against the new commit; refuse a conflict, and an upstreamed patch unless dropped."""
    if not series.patches:
        return None, (), None
    new = str(commit.id)
    check_paths(series, commit.tree, None)
    sp = classify(store.repo, new, series, since=old)
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
        sp = classify(store.repo, new, kept, since=old)
    return sp, dropped, text


def _checkout_state(project: Project, pins: pins_mod.Pins, store: ForkStore, series: Series) -> State | None:
    checkout = Checkout.find(project.root / pins.submodule, pins.omit)
    if checkout is None:
        return None
    at_old = classify(store.repo, pins.fork.commit, series)
    state = checkout_state(checkout.repo, pins.fork.commit, at_old, pins.omit)
    if state.state is State.OTHER:
        raise Refused(
            f"{pins.submodule}: the pin cannot move: the checkout is neither clean at {pins.fork.short} nor pin + series ("
            + ", ".join(state.differences)
            + "); commit, stash or remove that work first"
        )
    return state.state


def execute(project: Project, bump: BumpPlan, checkout: Checkout | None) -> None:
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
        if checkout is not None and bump.checkout is not None:
            _move_checkout(checkout, bump)


def _move_checkout(checkout: Checkout, bump: BumpPlan) -> None:
    """A clean checkout follows the pin; a patched one follows it with the (kept) series applied again."""
    try:
        checkout.move_to(bump.new)
        if bump.checkout is State.PATCHED and bump.series_plan is not None:
            apply_to_workdir(checkout.repo, bump.kept_series, bump.series_plan, bump.new, checkout.omit)
    except BaseException:
        checkout.move_to(bump.old)
        raise


def write_report(path: Path, bump: BumpPlan) -> None:
    write_atomic(path, bump.report())
