"""verify_pin: pins.yaml, .gitmodules, the gitlink in the index and the checked-out HEAD must agree."""

from __future__ import annotations

from dataclasses import dataclass

from ci.errors import ConfigError, OnebitError
from ci.git import Git, head_of, is_checked_out
from ci.pin.pins import Pins
from ci.pin.project import Project, Submodule, gitlink, read_gitmodules

# Messages, shared with the tests that match on them (tests/support/messages.py)
VERIFIED = "verify_pin: OK: pins.yaml, .gitmodules and the gitlink agree on {commit} ({reference}, {branch})"
PROBLEMS = "verify_pin: {count} problem(s)"
GITMODULES_MISSING = ".gitmodules: missing; the submodule {path} must be declared there"
URL_DISAGREES = '.gitmodules: submodule.{name}.url is "{url}" but pins.yaml fork.url is "{pinned}"'
URL_MISSING = ".gitmodules: submodule.{name} has no url; add url = {pinned} (pins.yaml fork.url)"
BRANCH_MISSING = ".gitmodules: submodule.{name} has no branch; add branch = {pinned} (pins.yaml fork.branch)"
BRANCH_DISAGREES = '.gitmodules: submodule.{name}.branch is "{branch}" but pins.yaml fork.branch is "{pinned}"'
NO_GITLINK = "index: no gitlink at {path}; add it with git update-index --add --cacheinfo 160000,{commit},{path}"
GITLINK_DISAGREES = "index: gitlink {path} is {gitlink} but pins.yaml fork.commit is {commit}; run nox -s bump_pin -- {commit}"
CHECKED_OUT_ELSEWHERE = "{path}: checked out at {head} but pins.yaml fork.commit is {commit}; nox -s build moves it (nox -s patches alone does too)"


@dataclass(frozen=True)
class PinCheck:
    pins: Pins | None
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def headline(self) -> str:
        if self.pins is None:
            return "verify_pin: pins.yaml did not load"
        f = self.pins.fork
        return VERIFIED.format(commit=f.short, reference=f.reference, branch=f.branch)

    def error(self) -> ConfigError:
        """Every problem, a line each (the entry point prints each as ``onebit-ci: error: ...``), then the count."""
        if len(self.problems) == 1:
            return ConfigError(self.problems[0])
        return ConfigError("\n".join([*self.problems, PROBLEMS.format(count=len(self.problems))]))


def verify(project: Project, pins: Pins | None = None, *, checkout_head: bool = True) -> PinCheck:
    """Every disagreement at once, not only the first. ``pins``: pins.yaml as the command already parsed it (else it
    is read here). ``checkout_head=False`` leaves the checkout's HEAD out (the build moves a clean checkout to the pin
    itself)."""
    problems: list[str] = []
    if pins is None:
        try:
            pins = project.load_pins()
        except OnebitError as exc:
            return PinCheck(None, (exc.message,))
    fork = pins.fork
    try:
        subs: dict[str, Submodule] | None = read_gitmodules(project.gitmodules_path)
    except OnebitError as exc:
        problems.append(exc.message)
        subs = None  # its problem is named: not also "no submodule with path"
    if not project.gitmodules_path.is_file():
        problems.append(GITMODULES_MISSING.format(path=pins.submodule))
    elif subs is not None:
        sub = subs.get(pins.submodule)
        if sub is None:
            problems.append(f".gitmodules: no submodule with path {pins.submodule} (pins.yaml: submodule)")
        else:
            if sub.url is None:
                problems.append(URL_MISSING.format(name=sub.name, pinned=fork.url))
            elif sub.url != fork.url:
                problems.append(URL_DISAGREES.format(name=sub.name, url=sub.url, pinned=fork.url))
            if sub.branch is None:
                problems.append(BRANCH_MISSING.format(name=sub.name, pinned=fork.branch))
            elif sub.branch != fork.branch:
                problems.append(BRANCH_DISAGREES.format(name=sub.name, branch=sub.branch, pinned=fork.branch))
    try:
        index = project.repo().index
        link = gitlink(index, pins.submodule)
        if link is None:
            problems.append(NO_GITLINK.format(path=pins.submodule, commit=fork.commit))
        elif link != fork.commit:
            problems.append(GITLINK_DISAGREES.format(path=pins.submodule, gitlink=link[:12], commit=fork.commit[:12]))
    except OnebitError as exc:
        problems.append(exc.message)
    workdir = project.root / pins.submodule
    if checkout_head and is_checked_out(workdir):
        try:
            head = head_of(Git(project.module_gitdir(pins.submodule), workdir))
        except OnebitError as exc:
            problems.append(exc.message)
            head = fork.commit
        if head is not None and head != fork.commit:
            problems.append(CHECKED_OUT_ELSEWHERE.format(path=pins.submodule, head=head[:12], commit=fork.commit[:12]))
    return PinCheck(pins, tuple(problems))
