"""Entry points: parse arguments, call one stage, print one line per error.

``python -m ci <command>``; the nox sessions call these, so every flag documented in docs/ works with
``nox -s <session> -- <flags>`` too.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from ci.errors import ConfigError, OnebitError
from ci.results import Status

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
    print(patches.back_to_series(project, args.branch))
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
    except CommandFailed:
        log_path = (request.build_root or project.root / "build") / args.profile / build.LOG
        print(f"{PROG}: the full log: {_rel(log_path, project.root)}", file=sys.stderr)
        raise
    return 0


# -- backend_ops ----------------------------------------------------------------------------------------------


def _expectations(values: Sequence[str]) -> dict[str, int]:
    from ci.backend_ops import OP_RE

    out: dict[str, int] = {}
    for value in values:
        op, sep, count = value.partition("=")
        if not sep or not OP_RE.match(op) or not count.isdigit() or int(count) < 1:
            raise ConfigError(f'--expect "{value}": not OP=N with N cases, 1 or more (e.g. --expect GATED_DELTA_NET=54)')
        if op in out:
            raise ConfigError(f"--expect {op}: given twice")
        out[op] = int(count)
    return out


def cmd_backend_ops(args: argparse.Namespace) -> int:
    from ci import backend_ops, results
    from ci.errors import GateFailed

    if args.from_sql and not args.from_log:
        raise ConfigError("--from-sql FILE goes with --from-log FILE (a run makes its own sql output)")
    if args.from_log and args.binary:
        raise ConfigError("--binary and --from-log: give one (--from-log judges a saved log and runs nothing)")
    expected = _expectations(args.expect)
    pinned: str | None = None if args.pinned_commit == "none" else args.pinned_commit
    root: Path | None = None
    if not expected or args.pinned_commit is None:
        try:
            project = _project(args)
        except ConfigError as exc:
            flags = " and ".join(f for f, missing in (("--expect OP=N", not expected), ("--pinned-commit SHA|none", args.pinned_commit is None)) if missing)
            raise ConfigError(f"{exc.message}; outside the project give {flags}") from None
        root = project.root
        pins = project.load_pins()
        if not expected:
            expected = pins.expected_cases()
            if not expected:
                raise ConfigError("pins.yaml: expect.backend_ops: no expectations; add them there or give --expect OP=N")
        if args.pinned_commit is None:
            pinned = pins.fork.commit
    if args.timeout <= 0:
        raise ConfigError(f"--timeout {args.timeout:g}: must be more than 0 seconds")
    dirty = backend_ops.DirtyRule(args.dirty) if args.dirty else None
    out = Path(args.out) if args.out else (root or Path.cwd()) / "build" / "gates"
    if args.from_log:
        result = backend_ops.judge_log(
            Path(args.from_log), args.device, expected, pinned, args.patched, args.build_key,
            dirty=dirty, sql_path=Path(args.from_sql) if args.from_sql else None,
        )
    else:
        if not args.binary:
            raise ConfigError("--binary PATH is required (the build's test-backend-ops), unless --from-log FILE judges a saved log")
        binary = Path(args.binary)
        if not binary.is_file() or not os.access(binary, os.X_OK):
            raise ConfigError(f"--binary {binary}: not an executable file; give the build's test-backend-ops")
        result = backend_ops.run_gate(
            binary, args.device, expected, pinned, args.patched, args.timeout, out / "backend_ops-logs", args.build_key, dirty=dirty
        )
    results.write_json(out / "backend_ops.json", result)
    results.write_junit(out / "backend_ops.junit.xml", [result])
    print(f"backend_ops: {result.summary}")
    for problem in result.problems:
        print(f"  - {problem}")
    print(f"backend_ops: wrote {out / 'backend_ops.json'} and {out / 'backend_ops.junit.xml'}")
    return 0 if result.ok else GateFailed.exit_code


# -- gpu_tests and ship ------------------------------------------------------------------------------------


def cmd_gpu_tests(args: argparse.Namespace) -> int:
    from ci import gates, ledger, profiles, results
    from ci.errors import GateFailed

    project = _project(args)
    if args.from_log:
        from ci import backend_ops

        pins = project.load_pins()
        device = profiles.get(args.profile).device
        result = backend_ops.judge_log(
            Path(args.from_log), device, pins.expected_cases(), pins.fork.commit, False, "", sql_path=Path(args.from_sql) if args.from_sql else None
        )
        out = Path(args.out) if args.out else ledger.default_results_dir(project.root) / "from-log"
        results.write_json(out / "backend_ops.json", result)
        results.write_junit(out / "backend_ops.junit.xml", [result], {"profile": args.profile, "source": args.from_log})
        ledger.append(ledger.ledger_path(ledger.default_results_dir(project.root)), result, ledger.BuildContext(profile=args.profile, device=device))
        done = [result]
    else:
        request = gates.GpuTestsRequest(
            profile=args.profile,
            gates=gates.select(args.gate),
            out=Path(args.out).resolve() if args.out else None,
            timeout=args.timeout,
            model=Path(args.model).resolve() if args.model else None,
            drafter=Path(args.drafter).resolve() if args.drafter else None,
            tokens=args.tokens,
        )
        if (request.model is None) != (request.drafter is None):
            raise ConfigError("--model and --drafter go together (the equivalence gate's target and drafter)")
        done = gates.run_gpu_tests(project, request, lambda line: print(line, flush=True))
    print(gates.summary_table(done))
    _step_summary(gates.summary_markdown(done, f"gpu_tests, profile {args.profile}"))
    failed = [r for r in done if not r.ok]
    for r in failed:
        for problem in r.problems:
            print(f"  {r.gate}: {problem}")
    if failed:
        raise GateFailed(f"gpu_tests: {len(failed)} of {len(done)} gates did not pass: {', '.join(r.gate for r in failed)}")
    print(f"gpu_tests: all {len(done)} gates passed")
    return 0


def _step_summary(markdown: str) -> None:
    """Append to the CI job's summary page when there is one (GitHub Actions sets GITHUB_STEP_SUMMARY)."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")


def cmd_ship(args: argparse.Namespace) -> int:
    from ci import ledger, ship
    from ci.build import BuildRequest

    project = _project(args)
    results_dir = ledger.default_results_dir(project.root)
    request = BuildRequest(profile=args.profile)
    result = ship.check(project, request, results_dir)
    table = ship.table(result)
    print(table)
    _step_summary(f"### ship, profile {args.profile}: {'every gate passed' if result.ok else 'REFUSED'}\n\n```\n{table}\n```\n")
    if not result.ok:
        raise ship.refusal(result)
    if args.check:
        print("ship: every gate passed for this build")
        return 0
    for f in ship.ship(project, result, results_dir, Path(args.dist) if args.dist else project.root / "dist"):
        print(f"ship: wrote {_rel(f, project.root)}")
    return 0


# -- tiny-models, equivalence ---------------------------------------------------------------------------------


def cmd_tiny_models(args: argparse.Namespace) -> int:
    from ci.tinymodels import write_tiny_models

    models = write_tiny_models(Path(args.out))
    print(f"tiny-models: wrote {models.target.name}, {models.drafter.name} and {models.other_target.name} in {args.out}")
    print(models.describe())
    return 0


def cmd_equivalence(args: argparse.Namespace) -> int:
    from ci import equivalence
    from ci.command import resolve
    from ci.errors import GateFailed, ServerFailed
    from ci.results import write_json, write_junit

    prompts = equivalence.load_prompts(Path(args.prompts)) if args.prompts else None
    the_plan = equivalence.plan(
        model=Path(args.model),
        drafter=Path(args.drafter),
        llama_server=Path(resolve(args.llama_server)),
        spec_type=args.spec_type,
        prompts=prompts,
        tokens=args.tokens,
        near_tie=args.near_tie,
        device=args.device,
        context=args.ctx_size,
        build_key=args.build_key,
    )
    if args.out:
        out = Path(args.out)
    else:
        try:
            out = _project(args).root / "build" / "gates"
        except ConfigError:
            out = Path.cwd() / "build" / "gates"
    result = equivalence.run(the_plan, out / "equivalence-logs")
    write_json(out / "equivalence.json", result)
    write_junit(out / "equivalence.junit.xml", [result])
    print(result.summary)
    for problem in result.problems:
        print(f"  - {problem}")
    print(f"equivalence: wrote {out / 'equivalence.json'} and {out / 'equivalence.junit.xml'}")
    if result.ok:
        return 0
    return GateFailed.exit_code if result.status is Status.FAILED else ServerFailed.exit_code



# -- bench ----------------------------------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    from ci import bench, profiles
    from ci.command import resolve
    from ci.files import write_json

    project = None
    with contextlib.suppress(ConfigError):
        project = _project(args)
    root: Path | None = project.root if project is not None else None
    if args.llama_server:
        llama_server = Path(resolve(args.llama_server))
        device = args.device or "auto"
    else:
        from ci.build import BuildRequest, current_build

        if project is None:
            raise ConfigError("--llama-server PATH is required outside the project (inside it, the current build of --profile runs)")
        manifest, _key = current_build(project, BuildRequest(profile=args.profile))
        llama_server = manifest.binary(project.root / "build" / args.profile, "llama-server")
        device = args.device or profiles.get(args.profile).serve_device
    if not Path(args.model).is_file():
        raise ConfigError(f"-m {args.model}: no such file")
    the_plan = bench.plan(
        model=Path(args.model).resolve(),  # the JSON record names it in full
        llama_server=llama_server,
        configs=[bench.parse_config(c) for c in args.config],
        device=device,
        rounds=args.rounds,
        prompt_reps=args.prompt_reps,
        decode_reps=args.decode_reps,
        decode_tokens=args.decode_tokens,
        prompt_tokens=args.prompt_tokens,
        context=args.ctx_size,
    )
    bench.check_configs(the_plan)
    logs = Path(args.logs) if args.logs else (root or Path.cwd()) / "build" / "bench" / "logs"

    def say(line: str) -> None:
        print(line, flush=True)

    with bench.box_lock(Path(args.lock) if args.lock else None, say):
        result = bench.run(the_plan, logs, say)
    figures = bench.print_report(result, sys.stdout)
    if args.json:
        write_json(Path(args.json), bench.to_json(result, figures))
        print(f"bench: wrote {args.json}")
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    import json

    from ci import profiles

    names = [n.strip() for n in args.profiles.split(",") if n.strip()]
    print(json.dumps(profiles.matrix(names), separators=(",", ":")))
    return 0


# -- the main job -------------------------------------------------------------------------------------------


def cmd_main_job(args: argparse.Namespace) -> int:
    """verify_pin, then build → gpu_tests → ship --check where the profile's toolchain is, else the no-GPU gate."""
    from ci import gates, ledger, profiles, results, toolchain
    from ci.errors import GateFailed, ToolchainError

    rc = cmd_verify_pin(args)
    if rc:
        return rc
    project = _project(args)
    profile = profiles.get(args.profile)
    try:
        toolchain.detect(profile, project.load_pins().build)
        missing = ""
    except ToolchainError as exc:
        missing = exc.message
    if missing:
        print(f"main job: no {profile.name} toolchain here ({missing})")
        print("main job: the build and the GPU gates need it; running the gate that needs no GPU: the route tests")
        out = ledger.default_results_dir(project.root) / "no-build"
        result = gates.route_gate(out)
        results.write_json(out / "route.json", result)
        results.write_junit(out / "route.junit.xml", [result])
        ledger.append(ledger.ledger_path(ledger.default_results_dir(project.root)), result, ledger.BuildContext(profile=profile.name))
        print(gates.summary_table([result]))
        if not result.ok:
            raise GateFailed(f"main job: the route gate failed: {'; '.join(result.problems[:3])}")
        return 0
    for step in (cmd_build, cmd_gpu_tests):
        step(args)
    args.check = True
    return cmd_ship(args)


# -- the parser -----------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=PROG, description="Build-and-test orchestration for the pinned ROCmFPX fork.")
    top.add_argument("--root", help="the onebit-ci checkout (default: the nearest directory with pins.yaml)")
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("verify-pin", help="check pins.yaml, .gitmodules, the gitlink and the checkout agree")
    p.set_defaults(func=cmd_verify_pin)

    p = sub.add_parser("bump-pin", help="move the pin to another commit of the pinned branch")
    p.add_argument("commit", help="the new commit: full or abbreviated (4+ hex digits), or head: the tip of the branch")
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

    p = sub.add_parser("gpu-tests", help="every gate against the current build's binaries; results to the ledger")
    p.add_argument("--profile", default="gfx1151", help="whose build to test (default gfx1151)")
    p.add_argument("--gate", action="append", default=[], help="run only this gate (route, backend_ops, equivalence); repeatable")
    p.add_argument("--from-log", metavar="FILE", help="judge a saved test-backend-ops console log with the profile's device and the pin; run nothing")
    p.add_argument("--from-sql", metavar="FILE", help="with --from-log: its --output sql output")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per test-backend-ops run (default 600)")
    p.add_argument("--model", help="the equivalence gate's target GGUF (default: pins.yaml equivalence, else tiny models)")
    p.add_argument("--drafter", help="the equivalence gate's drafter GGUF")
    p.add_argument("--tokens", type=int, help="tokens per prompt for the equivalence gate (default: pins.yaml, 256)")
    p.add_argument("--out", help="where the JSON, JUnit and logs go (default: build/results/<key>/)")
    p.set_defaults(func=cmd_gpu_tests)

    p = sub.add_parser("ship", help="build the serve launcher's wheel and sdist if every gate passed for the current build")
    p.add_argument("--profile", default="gfx1151", help="whose build ships (default gfx1151)")
    p.add_argument("--check", action="store_true", help="only say which gates passed, failed, are missing or stale")
    p.add_argument("--dist", help="where the wheel, sdist and release manifest go (default: dist/)")
    p.set_defaults(func=cmd_ship)

    p = sub.add_parser("main-job", help="what nox runs by default: verify the pin; build, gate and check shipping where the toolchain is")
    p.add_argument("--profile", default=os.environ.get("ONEBIT_PROFILE", "gfx1151"), help="the profile (default gfx1151, or $ONEBIT_PROFILE)")
    p.add_argument("--remote", help="fetch the pinned commit from this URL or local mirror when the store lacks it")
    p.set_defaults(
        func=cmd_main_job, build_type="Release", define=[], target=[], build_dir=None, jobs=None, gate=[], from_log=None, from_sql=None,
        timeout=600.0, model=None, drafter=None, tokens=None, out=None, dist=None, check=True,
    )

    p = sub.add_parser("matrix", help="the GitHub Actions matrix of the GPU job, as JSON: a runner and device per profile")
    p.add_argument("--profiles", default="gfx1151", help="comma-separated profiles (default gfx1151)")
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("export-patches", help="write the series back from the commits of a local branch of the checkout")
    p.add_argument("--branch", required=True, help="a branch of the checkout that starts at the pin, one commit per patch")
    p.set_defaults(func=cmd_export_patches)

    p = sub.add_parser("backend-ops", help="the test-backend-ops gate: run it on a device (or judge a saved log) against the pin")
    p.add_argument("--binary", help="the build's test-backend-ops (not needed with --from-log)")
    p.add_argument("--device", required=True, help="the test-backend-ops device to test: ROCm0, CUDA0, Vulkan0, CPU, ...")
    p.add_argument("--expect", action="append", default=[], metavar="OP=N", help="cases of OP that must run and pass (default: pins.yaml expect.backend_ops)")
    p.add_argument("--from-log", metavar="FILE", help="judge this saved console log instead of running anything")
    p.add_argument("--from-sql", metavar="FILE", help="with --from-log: its --output sql output, for the build_commit cross-check")
    p.add_argument("--pinned-commit", metavar="SHA", help="build_commit must be this commit (default: pins.yaml fork.commit; 'none' skips the check)")
    p.add_argument("--patched", action="store_true", help="patches are applied to the build: build_commit must end in -dirty")
    p.add_argument("--dirty", choices=["clean", "dirty"], help="override the -dirty rule (default: dirty exactly when --patched)")
    p.add_argument("--build-key", default="", help="the build key of the binaries, recorded in the results")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="seconds per test-backend-ops run (default: 600)")
    p.add_argument("--out", metavar="DIR", help="where backend_ops.json, backend_ops.junit.xml and the logs go (default: build/gates)")
    p.set_defaults(func=cmd_backend_ops)

    p = sub.add_parser("tiny-models", help="write the tiny GGUF models of the gates' CPU tier (target, drafter, other target)")
    p.add_argument("--out", required=True, help="directory to write them in")
    p.set_defaults(func=cmd_tiny_models)

    from ci.equivalence import DEFAULT_NEAR_TIE, DEFAULT_TOKENS

    p = sub.add_parser("equivalence", help="greedy output with the drafter must equal the output without it, and the drafter must draft")
    p.add_argument("--model", required=True, help="the target GGUF")
    p.add_argument("--drafter", required=True, help="the drafter GGUF (architecture dflash goes through serve --dflash)")
    p.add_argument("--llama-server", default="llama-server", help="the llama-server binary to test (default: llama-server on PATH)")
    p.add_argument("--spec-type", help="serve the drafter as -md D --spec-type T (default: --dflash for a dflash drafter, else draft-simple)")
    p.add_argument("--prompts", help="a directory of *.txt prompts replacing the committed code, prose and short")
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help=f"tokens to compare per prompt (default {DEFAULT_TOKENS})")
    p.add_argument("--near-tie", type=float, default=DEFAULT_NEAR_TIE, metavar="NATS", help=f"a first difference at a baseline top-2 margin at or under this is a near-tie (default {DEFAULT_NEAR_TIE:g})")
    p.add_argument("--device", default="auto", choices=["auto", "rocm", "vulkan", "cuda", "cpu"], help="serve's --device (default auto)")
    p.add_argument("-c", "--ctx-size", type=int, default=2048, help="context size of both servers (default 2048)")
    p.add_argument("--build-key", default="", help="the build key of the llama-server, recorded in the results")
    p.add_argument("--out", metavar="DIR", help="where equivalence.json, equivalence.junit.xml and the server logs go (default: build/gates)")
    p.set_defaults(func=cmd_equivalence)

    from ci import bench

    p = sub.add_parser("bench", help="A/B-measure 1bit serve configs (the first is the baseline), interleaved round by round on fresh servers")
    p.add_argument("-m", "--model", required=True, help="the model every config serves")
    p.add_argument("--config", action="append", default=[], metavar="NAME=ARGS", help='1bit serve arguments of one config, the first the baseline: --config base= --config dflash="--dflash D.gguf"')
    p.add_argument("--llama-server", help="this llama-server (default: the current build of --profile)")
    p.add_argument("--profile", default="gfx1151", help="whose build's llama-server runs when --llama-server is not given (default gfx1151)")
    p.add_argument("--device", choices=["auto", "rocm", "vulkan", "cuda", "cpu"], help="serve's --device (default: the profile's; auto with --llama-server)")
    p.add_argument("--rounds", type=int, default=bench.DEFAULT_ROUNDS, help=f"rounds, each running every config once (default {bench.DEFAULT_ROUNDS})")
    p.add_argument("--prompt-reps", type=int, default=bench.DEFAULT_PROMPT_REPS, help=f"long-prompt requests per run (default {bench.DEFAULT_PROMPT_REPS})")
    p.add_argument("--decode-reps", type=int, default=bench.DEFAULT_DECODE_REPS, help=f"requests per decode prompt per run (default {bench.DEFAULT_DECODE_REPS})")
    p.add_argument("--decode-tokens", type=int, default=bench.DEFAULT_DECODE_TOKENS, help=f"tokens generated per decode request (default {bench.DEFAULT_DECODE_TOKENS})")
    p.add_argument("--prompt-tokens", type=int, default=bench.DEFAULT_PROMPT_TOKENS, help=f"tokens of the long prompt (default {bench.DEFAULT_PROMPT_TOKENS})")
    p.add_argument("-c", "--ctx-size", type=int, default=bench.DEFAULT_CONTEXT, help=f"every server's context (default {bench.DEFAULT_CONTEXT})")
    p.add_argument("--lock", metavar="PATH", help="hold an exclusive lock on PATH for the whole run (a shared box); a second bench waits")
    p.add_argument("--json", metavar="OUT", help="write the record (configs, every sample, the figures) here")
    p.add_argument("--logs", metavar="DIR", help="the servers' logs (default: build/bench/logs)")
    p.set_defaults(func=cmd_bench)
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
        from ci.errors import CommandFailed

        if isinstance(exc, CommandFailed) and exc.tail.strip():
            sys.stderr.write(exc.tail if exc.tail.endswith("\n") else exc.tail + "\n")
        for line in exc.message.splitlines() or [""]:
            print(f"{PROG}: error: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
