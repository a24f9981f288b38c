"""Entry points: parse arguments, dispatch to a stage, print one line per error.

``python -m ci <command>``; the nox sessions call these, so every flag documented in docs/ works with
``nox -s <session> -- <flags>`` too. Each option and default is defined once, here or in its stage.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from ci.errors import CommandFailed, OnebitError, ToolchainError

PROG = "onebit-ci"
INTERNAL_ERROR = 70  # EX_SOFTWARE: a bug here, not a problem the user can fix
IO_ERROR = 74  # EX_IOERR
CRASH_LOG = "onebit-ci-crash.log"


def say(line: str) -> None:
    print(line, flush=True)


def _ctx(args: argparse.Namespace):  # type: ignore[no-untyped-def]  # the Context, imported late: --help stays quick
    from ci.compile.context import Context
    from ci.pin.project import find_project

    if getattr(args, "_ctx", None) is None:
        args._ctx = Context(find_project(Path(args.root) if args.root else None))
    return args._ctx


def _path(value: str | None) -> Path | None:
    """A path as given: messages name it the way the user wrote it."""
    return Path(value) if value else None


def _abs(value: str | None) -> Path | None:
    """A path made absolute now: it is recorded, or used after a change of directory."""
    return Path(value).resolve() if value else None


# -- dispatch: each command builds its stage's request and calls it ---------------------------------------------


def cmd_verify_pin(args: argparse.Namespace) -> int:
    from ci.pin import verify

    return verify.session(_ctx(args).project, say)


def cmd_bump_pin(args: argparse.Namespace) -> int:
    from ci.gates.selftest import stale_lines
    from ci.pin import bump

    request = bump.BumpRequest(args.commit, args.branch, args.allow_rollback, args.reference, args.drop_upstreamed, url=args.url, remote=args.remote)
    return bump.session(_ctx(args).project, request, _path(args.report), say, stale_lines)


def cmd_patches(args: argparse.Namespace) -> int:
    from ci.source import sync

    source = _ctx(args).source()
    if args.check:
        return sync.check(source, args.remote, say)
    say(sync.sync(source, remote=args.remote, reset=args.reset).describe())
    return 0


def cmd_export_patches(args: argparse.Namespace) -> int:
    from ci.source import export
    from ci.source.series import PATCHES_DIR

    ctx = _ctx(args)
    return export.session(ctx.source(), ctx.root / PATCHES_DIR, args.branch, say)


def cmd_build(args: argparse.Namespace) -> int:
    from ci.compile.cmake import BuildRequest
    from ci.compile.stage import run_build

    request = BuildRequest(args.profile, args.build_type, tuple(args.define), tuple(args.target), args.remote, _abs(args.build_dir), args.jobs)
    run_build(_ctx(args), request, say)
    return 0


def cmd_gpu_tests(args: argparse.Namespace) -> int:
    from ci.gates.registry import GateOptions
    from ci.release import evidence

    ctx = _ctx(args)
    if args.from_log:
        done = [evidence.judge_saved_log(ctx, args.profile, Path(args.from_log), _path(args.from_sql), _path(args.out))]
    else:
        if (args.model is None) != (args.drafter is None):
            from ci.errors import ConfigError

            raise ConfigError("--model and --drafter go together (the equivalence gate's target and drafter)")
        options = GateOptions(timeout=args.timeout, rounds=args.rounds, model=_abs(args.model), drafter=_abs(args.drafter), tokens=args.tokens)
        done = evidence.run_gpu_tests(ctx, evidence.GpuTestsRequest(args.profile, tuple(args.gate), _abs(args.out), options), say)
    evidence.report(done, f"gpu_tests, profile {args.profile}", say)
    return 0


def cmd_ship(args: argparse.Namespace) -> int:
    from ci.release import ledger, ship

    ctx = _ctx(args)
    return ship.session(ctx, args.profile, ledger.default_results_dir(ctx.root), _path(args.dist), args.check, say)


def cmd_main_job(args: argparse.Namespace) -> int:
    from ci.release import main_job

    return main_job.run(_ctx(args), main_job.MainJobRequest(args.profile, args.remote), say)


def cmd_gate_selftest(args: argparse.Namespace) -> int:
    from ci.release import evidence

    return evidence.gate_selftest_session(_ctx(args), args.profile, _abs(args.faults), tuple(args.fault), say, args.jobs, args.keep)


def cmd_selftest_fault(args: argparse.Namespace) -> int:
    from ci.gates import selftest

    fault = next((f for f in selftest.load_faults(_abs(args.faults)) if f.id == args.fault), None)
    if fault is None:
        from ci.errors import ConfigError

        raise ConfigError(f"--fault {args.fault}: no such fault")
    return selftest.inside(_ctx(args), args.profile, fault, Path(args.work), say)


def cmd_bisect(args: argparse.Namespace) -> int:
    from ci import bisect
    from ci.gates.registry import GateOptions
    from ci.release.evidence import expectations

    options = GateOptions(timeout=args.timeout, rounds=args.rounds)
    expect = tuple(expectations(args.expect).items())
    request = bisect.BisectRequest(
        args.profile, args.good, args.bad, args.gate, args.remote, args.max_steps, args.check_good,
        bump_report=_abs(args.bump_report), out=_abs(args.out), expect=expect, options=options,
    )  # fmt: skip
    return bisect.session(_ctx(args), request, say)


def cmd_matrix(args: argparse.Namespace) -> int:
    import json

    from ci.compile import profiles

    say(json.dumps(profiles.matrix([n.strip() for n in args.profiles.split(",") if n.strip()]), separators=(",", ":")))
    return 0


def cmd_backend_ops(args: argparse.Namespace) -> int:
    from ci.release import evidence

    request = evidence.BackendOpsRequest(
        args.device, _path(args.binary), tuple(args.expect), _path(args.from_log), _path(args.from_sql), args.pinned_commit,
        args.patched, args.dirty, args.build_key, args.timeout, _path(args.out),
    )  # fmt: skip
    return evidence.backend_ops_session(lambda: _ctx(args), request, say)


def cmd_tiny_models(args: argparse.Namespace) -> int:
    from ci.gates.tinymodels import write_tiny_models

    models = write_tiny_models(Path(args.out))
    say(f"tiny-models: wrote {models.target.name}, {models.near_drafter.name} (the default drafter), {models.drafter.name} and {models.other_target.name} in {args.out}")
    say(models.describe())
    return 0


def cmd_equivalence(args: argparse.Namespace) -> int:
    from ci.command import resolve
    from ci.gates import equivalence
    from ci.release import evidence

    prompts = equivalence.load_prompts(Path(args.prompts)) if args.prompts else None
    equivalence_plan = equivalence.plan(
        model=Path(args.model), drafter=Path(args.drafter), llama_server=Path(resolve(args.llama_server)), spec_type=args.spec_type,
        prompts=prompts, tokens=args.tokens, near_tie=args.near_tie, device=args.device, context=args.ctx_size, build_key=args.build_key,
    )  # fmt: skip
    out = _path(args.out) or _project_or_cwd(args) / "build" / "gates"
    return evidence.equivalence_session(equivalence_plan, out, say)


def cmd_bench(args: argparse.Namespace) -> int:
    from ci import bench
    from ci.command import resolve
    from ci.errors import ConfigError

    target = bench.recipe_target(args.recipe, _abs(args.recipes), args.check) if args.recipe else None
    configs = bench.recipe_configs(args.recipe, args.args or "", _abs(args.recipes)) if args.recipe else [bench.parse_config(c) for c in args.config]
    if args.llama_server:
        llama_server, device, root = Path(resolve(args.llama_server)), args.device or "auto", _project_or_cwd(args)
    else:
        llama_server, profile_device, root = bench.llama_server_of(lambda: _ctx(args), args.profile)
        device = args.device or profile_device
    if not Path(args.model).is_file():
        raise ConfigError(f"-m {args.model}: no such file")
    bench_plan = bench.plan(
        model=Path(args.model).resolve(), llama_server=llama_server, configs=configs, device=device,
        rounds=args.rounds, prompt_reps=args.prompt_reps, decode_reps=args.decode_reps, decode_tokens=args.decode_tokens,
        prompt_tokens=args.prompt_tokens, context=args.ctx_size, warmup_tokens=args.warmup_tokens,
    )  # fmt: skip
    logs = _path(args.logs) or root / "build" / "bench" / "logs"
    if target is not None:
        import shlex

        shown = "nox -s bench -- " + shlex.join(sys.argv[sys.argv.index("bench") + 1 :] if "bench" in sys.argv else ["--recipe", args.recipe])
        return bench.recipe_session(bench_plan, target, logs, _path(args.lock), _path(args.json), shown, say)
    return bench.session(bench_plan, logs, _path(args.lock), _path(args.json), say)


def _project_or_cwd(args: argparse.Namespace) -> Path:
    from ci.errors import ConfigError

    try:
        return Path(_ctx(args).root)
    except ConfigError:
        return Path.cwd()


# -- the entry point -------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    from ci.parser import parser

    args = parser(COMMANDS).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        handler: Callable[[argparse.Namespace], int] = args.func
        return handler(args)
    except OnebitError as exc:
        if args.debug:
            traceback.print_exc()
        if isinstance(exc, CommandFailed) and exc.tail.strip():
            sys.stderr.write(exc.tail if exc.tail.endswith("\n") else exc.tail + "\n")
        for line in exc.message.splitlines() or [""]:
            print(f"{PROG}: error: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:  # run outside nox's environment, by a Python without the project's packages
        if args.debug:
            raise
        print(f"{PROG}: error: the Python package {exc.name} is not installed for {sys.executable}; run through nox (nox -s <session>) or pip install -e .", file=sys.stderr)
        return ToolchainError.exit_code
    except OSError as exc:  # the disk, not the code: a full disk, a read-only or vanished directory
        if args.debug:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{PROG}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return IO_ERROR
    except Exception as exc:  # a bug: one line, the traceback in a file (or on the terminal with --debug)
        if args.debug:
            raise
        where = _crash_log(args, argv)
        print(f"{PROG}: internal error: {type(exc).__name__}: {str(exc)[:200]}; details in {where}", file=sys.stderr)
        return INTERNAL_ERROR


def _crash_log(args: argparse.Namespace, argv: Sequence[str] | None) -> str:
    text = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {PROG} {' '.join(argv if argv is not None else sys.argv[1:])}\n"
    text += traceback.format_exc()
    for base in (getattr(getattr(args, "_ctx", None), "root", None), Path(args.root) if args.root else None, Path.cwd()):
        if base is None:
            continue
        path = Path(base) / "build" / CRASH_LOG
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as fh:
                fh.write(text + "\n")
            return os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(path)
        except OSError:
            continue
    return "(no writable place; run again with --debug)"


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "verify-pin": cmd_verify_pin,
    "bump-pin": cmd_bump_pin,
    "patches": cmd_patches,
    "export-patches": cmd_export_patches,
    "build": cmd_build,
    "gpu-tests": cmd_gpu_tests,
    "ship": cmd_ship,
    "main-job": cmd_main_job,
    "gate-selftest": cmd_gate_selftest,
    "selftest-fault": cmd_selftest_fault,
    "bisect": cmd_bisect,
    "matrix": cmd_matrix,
    "backend-ops": cmd_backend_ops,
    "tiny-models": cmd_tiny_models,
    "equivalence": cmd_equivalence,
    "bench": cmd_bench,
}
