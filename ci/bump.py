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
from ci.project import GITLINK_MODE, Project, read_gitmodules, set_gitmodules_value

log = logging.getLogger("onebit-ci")

SUBJECTS_SHOWN = 20


@dataclass(frozen=True)
class BumpRequest:
    target: str
    branch: str | None = None
    allow_rollback: bool = False
    reference: str | None = None
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

    @property
    def unchanged(self) -> bool:
        return self.move.relation is Relation.SAME and self.branch == self.pins.fork.branch

    def headline(self) -> str:
        old, new = self.old[:7], self.new[:7]
        if self.move.relation is Relation.SAME:
            return f"pin is already {new} ({self.pins.fork.reference}) on {self.branch}: nothing to do"
        how = {
            Relation.AHEAD: f"{self.move.ahead} commits ahead",
            Relation.ROLLBACK: f"ROLLBACK: {self.move.behind} commits behind",
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
        expected = self.pins.expected_cases()
        if expected:
            lines += ["### Gate expectations carried over", ""]
            lines += [f"- test-backend-ops `{op}`: {n} cases" for op, n in expected.items()]
            lines += ["", "The counts belong to the pin: confirm them with `nox -s gpu_tests` before this lands.", ""]
        return "\n".join(lines)


def plan(project: Project, store: ForkStore, request: BumpRequest) -> BumpPlan:
    pins = project.load_pins()
    branch = request.branch or pins.fork.branch
    commit = store.resolve(request.target)
    new = str(commit.id)
    if not store.on_branch(new, branch):
        elsewhere = store.branches_containing(new)
        where = f"it is only on {', '.join(elsewhere[:5])}" if elsewhere else "no branch reaches it"
        raise Refused(f"commit {new[:12]} is not on the pinned branch {branch} ({where}); pin a commit of {branch}")
    old = pins.fork.commit
    move = store.move(old, new)
    if move.relation in (Relation.ROLLBACK, Relation.SIDEWAYS, Relation.UNRELATED) and not request.allow_rollback:
        why = {
            Relation.ROLLBACK: f"{new[:12]} is an ancestor of the current pin {old[:12]} ({move.behind} commits back)",
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
    )


def execute(project: Project, bump: BumpPlan, checkout: Checkout | None) -> None:
    """Write pins.yaml, .gitmodules, the gitlink and the checkout; on any failure restore all of them."""
    if checkout is not None:
        checkout.require_clean("the pin cannot move")
    targets = [project.pins_path, project.gitmodules_path, project.index_path()]
    with all_or_nothing(targets):
        write_atomic(project.pins_path, bump.pins_text)
        if bump.gitmodules_text is not None:
            write_atomic(project.gitmodules_path, bump.gitmodules_text)
        repo = project.repo()
        index = repo.index
        index.read()
        try:
            index.add(pygit2.IndexEntry(bump.pins.submodule, pygit2.Oid(hex=bump.new), GITLINK_MODE))
            index.add(pins_mod.PINS_FILE)
            if bump.gitmodules_text is not None:
                index.add(".gitmodules")
            index.write()
        except pygit2.GitError as exc:
            raise GitError(f"{project.index_path()}: cannot be written ({exc}); is another git running?") from None
        if checkout is not None:
            try:
                checkout.move_to(bump.new)
            except BaseException:
                checkout.move_to(bump.old)
                raise


def write_report(path: Path, bump: BumpPlan) -> None:
    write_atomic(path, bump.report())
