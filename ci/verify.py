"""verify_pin: pins.yaml, .gitmodules, the gitlink in the index and the checked-out HEAD must agree."""

from __future__ import annotations

from dataclasses import dataclass

from ci.checkout import Checkout
from ci.errors import OnebitError
from ci.pins import Pins
from ci.project import Project, gitlink, read_gitmodules


@dataclass(frozen=True)
class Verdict:
    pins: Pins | None
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(project: Project, *, checkout_head: bool = True) -> Verdict:
    """Every disagreement at once, not only the first. ``checkout_head=False`` leaves the checkout's HEAD out
    (the build moves a clean checkout to the pin itself)."""
    problems: list[str] = []
    try:
        pins = project.load_pins()
    except OnebitError as exc:
        return Verdict(None, (exc.message,))
    fork = pins.fork
    try:
        subs = read_gitmodules(project.gitmodules_path)
    except OnebitError as exc:
        problems.append(exc.message)
        subs = {}
    sub = subs.get(pins.submodule)
    if not project.gitmodules_path.is_file():
        problems.append(f".gitmodules: missing; the submodule {pins.submodule} must be declared there")
    elif sub is None:
        problems.append(f".gitmodules: no submodule with path {pins.submodule} (pins.yaml: submodule)")
    else:
        if sub.url != fork.url:
            problems.append(f'.gitmodules: submodule.{sub.name}.url is "{sub.url}" but pins.yaml fork.url is "{fork.url}"')
        if sub.branch != fork.branch:
            problems.append(f'.gitmodules: submodule.{sub.name}.branch is "{sub.branch}" but pins.yaml fork.branch is "{fork.branch}"')
    try:
        index = project.repo().index
        link = gitlink(index, pins.submodule)
        if link is None:
            problems.append(f"index: no gitlink at {pins.submodule}; add it with git update-index --add --cacheinfo 160000,{fork.commit},{pins.submodule}")
        elif link != fork.commit:
            problems.append(f"index: gitlink {pins.submodule} is {link[:12]} but pins.yaml fork.commit is {fork.commit[:12]}; run nox -s bump_pin -- {fork.commit[:12]}")
    except OnebitError as exc:
        problems.append(exc.message)
    checkout = None
    try:
        if checkout_head:
            checkout = Checkout.find(project.root / pins.submodule, pins.omit)
    except OnebitError as exc:
        problems.append(exc.message)
    if checkout is not None and checkout.head() != fork.commit:
        problems.append(
            f"{pins.submodule}: checked out at {checkout.head()[:12]} but pins.yaml fork.commit is {fork.commit[:12]}; "
            "nox -s build moves it, or check it out by hand"
        )
    return Verdict(pins, tuple(problems))
