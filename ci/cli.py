"""Entry points: parse arguments, call one stage, print one line per error.

``python -m ci <command>``; the nox sessions call these, so every flag documented in docs/ works with
``nox -s <session> -- <flags>`` too.
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from ci.errors import OnebitError

log = logging.getLogger("onebit-ci")
PROG = "onebit-ci"

Handler = Callable[[argparse.Namespace], int]


def _project(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from ci.project import find_project

    return find_project(Path(args.root) if args.root else None)


# -- verify_pin -----------------------------------------------------------------------------------------------


def cmd_verify_pin(args: argparse.Namespace) -> int:
    from ci.verify import verify

    verdict = verify(_project(args))
    if verdict.ok:
        assert verdict.pins is not None
        f = verdict.pins.fork
        print(f"verify_pin: OK: pins.yaml, .gitmodules and the gitlink agree on {f.short} ({f.reference}, {f.branch})")
        return 0
    for p in verdict.problems:
        print(f"{PROG}: error: {p}", file=sys.stderr)
    print(f"verify_pin: {len(verdict.problems)} problem(s)", file=sys.stderr)
    return 2


# -- bump_pin -------------------------------------------------------------------------------------------------


def cmd_bump_pin(args: argparse.Namespace) -> int:
    from ci import bump
    from ci.checkout import Checkout
    from ci.fork import ForkStore
    from ci.verify import verify

    project = _project(args)
    verdict = verify(project)
    if not verdict.ok:
        raise OnebitError("the current pin does not verify; fix it first: " + "; ".join(verdict.problems))
    pins = project.load_pins()
    store = ForkStore.open(project.module_gitdir(pins.submodule))
    remote = args.remote or pins.fork.url
    log.info("fetching %s", remote)
    log.info("fetched %s", store.sync(remote))
    request = bump.BumpRequest(
        target=args.commit, branch=args.branch, allow_rollback=args.allow_rollback, reference=args.reference,
        drop_upstreamed=args.drop_upstreamed,
    )
    the_plan = bump.plan(project, store, request)
    print(f"bump_pin: {the_plan.headline()}")
    for line in the_plan.subject_lines():
        print(f"  {line}")
    if the_plan.series_plan is not None:
        print(f"bump_pin: patch series at {the_plan.new[:7]}:")
        for v in the_plan.series_plan.verdicts:
            print(f"  {v.line()}")
        for name in the_plan.dropped:
            print(f"  {name}: already upstream, dropped from the series")
    if the_plan.unchanged:
        return 0
    checkout = Checkout.find(project.root / pins.submodule, pins.omit)
    bump.execute(project, the_plan, checkout)
    report = Path(args.report) if args.report else project.root / "build" / "bump-report.md"
    bump.write_report(report, the_plan)
    print(f"bump_pin: wrote pins.yaml and the gitlink (staged); report: {_rel(report, project.root)}")
    print(f"bump_pin: next: nox -s build gpu_tests, then git commit -F {_rel(report, project.root)}")
    return 0


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


# -- patches ------------------------------------------------------------------------------------------------


def cmd_patches(args: argparse.Namespace) -> int:
    from ci import patches
    from ci.words import count

    project = _project(args)
    if args.check:
        pins, series, _repo, plan = patches.plan_at_pin(project, args.remote)
        print(f"patches: {count(len(series.patches), 'patch')} ({series.digest[:12]}) against the pin {pins.fork.short}:")
        for line in patches.check_lines(plan):
            print(f"  {line}")
        return 0 if plan.clean else 4
    print(patches.apply_series(project, args.remote))
    return 0


def cmd_export_patches(args: argparse.Namespace) -> int:
    from ci import patches

    project = _project(args)
    plan = patches.plan_export(project, args.branch)
    patches.write_export(project, plan)
    print(f"export_patches: wrote {len(plan.files)} patches from {args.branch} into patches/ (series rewritten)")
    for name, _ in plan.files:
        print(f"  {name}")
    for name in plan.stale:
        print(f"  removed {name}")
    return 0


# -- build --------------------------------------------------------------------------------------------------


def cmd_build(args: argparse.Namespace) -> int:
    from ci import build
    from ci.errors import CommandFailed

    project = _project(args)
    request = build.BuildRequest(
        profile=args.profile,
        build_type=args.build_type,
        defines=tuple(f"-D{d}" for d in args.define),
        targets=tuple(args.target),
        remote=args.remote,
        build_root=Path(args.build_dir).resolve() if args.build_dir else None,
        jobs=args.jobs,
    )
    try:
        build.run_build(project, request, lambda line: print(line, flush=True))
    except CommandFailed as exc:
        sys.stderr.write(exc.tail if exc.tail.endswith("\n") else exc.tail + "\n")
        log_path = (request.build_root or project.root / "build") / args.profile / build.LOG
        print(f"{PROG}: the full log: {_rel(log_path, project.root)}", file=sys.stderr)
        raise
    return 0


# -- the parser -----------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=PROG, description="Build-and-test orchestration for the pinned ROCmFPX fork.")
    top.add_argument("--root", help="the onebit-ci checkout (default: the nearest directory with pins.yaml)")
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("verify-pin", help="check pins.yaml, .gitmodules, the gitlink and the checkout agree")
    p.set_defaults(func=cmd_verify_pin)

    p = sub.add_parser("bump-pin", help="move the pin to another commit of the pinned branch")
    p.add_argument("commit", help="the new commit: full or abbreviated (4+ hex digits)")
    p.add_argument("--remote", help="fetch from this URL or local mirror instead of pins.yaml's fork.url")
    p.add_argument("--branch", help="the branch the new pin must be on (default: pins.yaml's fork.branch)")
    p.add_argument("--allow-rollback", action="store_true", help="allow a commit behind or beside the current pin")
    p.add_argument("--reference", help='a human name for the new pin, e.g. "ROCmFPX#4"')
    p.add_argument("--report", help="where to write the markdown report (default: build/bump-report.md)")
    p.add_argument("--drop-upstreamed", action="store_true", help="remove patches the new commit already has from the series")
    p.set_defaults(func=cmd_bump_pin)

    p = sub.add_parser("patches", help="apply the patch series to the checkout at the pin (or --check it)")
    p.add_argument("--check", action="store_true", help="apply nothing; print each patch's fate: applies, already upstream, conflicts")
    p.add_argument("--remote", help="fetch the pinned commit from this URL or local mirror when the store lacks it")
    p.set_defaults(func=cmd_patches)

    p = sub.add_parser("build", help="check out the pin, apply the patches, configure and compile a profile")
    p.add_argument("--profile", default="gfx1151", help="gfx1151 (default), gfx1100, gfx1201, cuda, vulkan, cpu")
    p.add_argument("--build-type", default="Release", help="CMAKE_BUILD_TYPE (default Release)")
    p.add_argument("-D", "--define", action="append", default=[], metavar="NAME=VALUE", help="a CMake flag over the profile's and the pin's, as cmake -D takes it")
    p.add_argument("--target", action="append", default=[], help="a target to build (default: pins.yaml build.targets)")
    p.add_argument("--remote", help="fetch the pinned commit from this URL or local mirror when the store lacks it")
    p.add_argument("--build-dir", help="the directory holding one build dir per profile (default: build/)")
    p.add_argument("-j", "--jobs", type=int, help="parallel compile jobs (default: ninja's)")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("export-patches", help="write the series back from the commits of a local branch of the checkout")
    p.add_argument("--branch", required=True, help="a branch of the checkout that starts at the pin, one commit per patch")
    p.set_defaults(func=cmd_export_patches)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        handler: Handler = args.func
        return handler(args)
    except OnebitError as exc:
        if args.debug:
            traceback.print_exc()
        for line in exc.message.splitlines() or [""]:
            print(f"{PROG}: error: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
