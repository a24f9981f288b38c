"""``1bit serve -m MODEL.gguf [options] [-- extra llama-server args]``: gather the inputs, decide, print, run.

``--dry-run`` prints the decision as one JSON object on stdout and starts nothing::

    {"argv": [...], "env": {<added or changed only>}, "notes": [...], "recipes": [<applied ids>], "gated": {"state": ...}}

Everything else (recipe lines, the decision, errors) goes to stderr. Errors are one line each:
``1bit serve: error: <file or flag>: <problem>``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from serve import flags, gated, launch, recipes, server
from serve.bounded import not_a_file
from serve.errors import (
    A_GGUF_FILE,
    A_RECIPES_FILE,
    FLAG_PATH,
    LLAMA_SERVER,
    FileProblem,
    NoBuild,
    NoServer,
    Refused,
    ServeError,
    UsageError,
    did_you_mean,
    printable,
)
from serve.facts import read_facts
from serve.route import DEVICE_CHOICES, EMPTY_PATH, RouteDecision, RouteOptions, check_options, route

PROG = "1bit"
SERVE = f"{PROG} serve"
COMMANDS = ("serve",)

# Messages, shared with the tests that match on them (tests/support/messages.py)
ERROR = "{prog}: error: {problem}"  # prog: PROG or SERVE
UNKNOWN_COMMAND = "unknown command {command!r}{suggestion}; commands: {commands}"
SEE_HELP = "{message} (" + SERVE + " --help)"  # after a usage error (argparse's own, or the next one)
UNEXPECTED_ARGUMENT = "unexpected argument {argument!r}: the model is -m MODEL.gguf"
UNKNOWN_OPTION = "unknown option{suggestion}; llama-server's own flags go after --"
RECIPES_AND_NO_RECIPES = "--recipes FILE and --no-recipes: pick one"
NO_BUILD_YET = "no build yet (dry run)"  # where llama-server is from, on a dry run without a build
LAUNCH_WOULD_STOP = "a launch would stop here: {problem}"
STALE_WARNING = SERVE + ": warning: {stale}; running it anyway (--allow-stale)"
NOT_GATED_WARNING = SERVE + ": warning: {detail}; running it anyway (--require-gated refuses it)"
NOT_GATED_REFUSED = "{detail}; run the release's own build, or drop --require-gated"
NO_RELEASE_REFUSED = "{detail}; install the shipped wheel, or set {variable} to its release.json"
DECIDED = SERVE + ": device {device}, profile {profile}, llama-server from {source}"
RECIPE_APPLIED = SERVE + ": recipe {id}: {added}"
WOULD_RUN = SERVE + ": would run: {command}"
RUNNING = SERVE + ": running: {command}"
STARTED = SERVE + ": llama-server pid {pid}, http://{host}:{port} (Ctrl-C stops it)"
INTERNAL_ERROR = "internal error: {error} (a bug in serve; --debug shows where)"
INTERNAL_EXIT = 70  # EX_SOFTWARE: serve's own fault, not the input's


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(SEE_HELP.format(message=message))


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=SERVE,
        allow_abbrev=False,
        description="Run llama-server for a GGUF file on the route its header calls for (docs/serve.md).",
        epilog="Arguments after -- go to llama-server unchanged; a flag given there wins over serve's own.",
    )
    p.add_argument("-m", "--model", required=True, metavar="MODEL.gguf", help="the model")
    p.add_argument(
        "--device",
        default="auto",
        metavar="{" + ",".join(DEVICE_CHOICES) + "}",
        help="where it runs (default auto: rocm for a Hadamard-rotated file, else $ONEBIT_SERVE_DEVICE or vulkan)",
    )
    p.add_argument("--llama-server", metavar="PATH", help="this llama-server instead of the profile's build")
    p.add_argument("--allow-stale", action="store_true", help="run the profile's build even when pins.yaml or patches/ moved on since it was built")
    p.add_argument(
        "--profile", help="the build profile whose llama-server runs (default from the device: rocm->gfx1151, cuda, cpu, vulkan)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080, llama-server's own)")
    p.add_argument("-c", "--ctx-size", type=int, metavar="N", help="context size (default: the model's)")
    p.add_argument(
        "-fa",
        "--flash-attn",
        nargs="?",
        const="on",
        metavar="on|off|auto",
        help="flash attention (-fa alone: on); passed on vulkan, cuda and cpu",
    )
    p.add_argument("--dflash", metavar="DRAFT.gguf", help="a DFlash drafter (architecture dflash)")
    p.add_argument("--mtp", metavar="HEAD.gguf", help="an MTP head")
    p.add_argument("--mtp-max", type=int, metavar="N", help="draft length (default: the DFlash block size - 1, else 16)")
    p.add_argument(
        "--mtp-p-min", metavar="P", help="the drafter's minimum probability (with --dflash the default is recipe dflash-p-min-0)"
    )
    p.add_argument("--long-model", action="store_true", help="this launch serves long prompts (16K tokens and more): the recipes for them apply (docs/recipes.md)")
    p.add_argument("--recipes", metavar="FILE", help="these recipes instead of the built-in ones")
    p.add_argument("--no-recipes", action="store_true", help="apply no recipes")
    p.add_argument("--skip-recipe", action="append", default=[], metavar="ID", help="apply every recipe but this one (the bench's without-config); repeatable")
    p.add_argument("--require-gated", action="store_true", help="refuse a llama-server that is not the one the release's gates judged")
    p.add_argument("--dry-run", action="store_true", help="print the decision as JSON on stdout; start nothing")
    p.add_argument("--debug", action="store_true", help="show a traceback with an error")
    return p


def _options(p: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[argparse.Namespace, tuple[str, ...]]:
    args = list(argv)
    extra: tuple[str, ...] = ()
    if "--" in args:
        cut = args.index("--")
        args, extra = args[:cut], tuple(args[cut + 1 :])
    ns, unknown = p.parse_known_args(args)
    if unknown:
        word = unknown[0]
        if word.startswith("-"):
            known = [s for action in p._actions for s in action.option_strings]
            raise UsageError(UNKNOWN_OPTION.format(suggestion=did_you_mean(word, known)), word)
        raise UsageError(SEE_HELP.format(message=UNEXPECTED_ARGUMENT.format(argument=word)))
    return ns, extra


def _summary(decision: RouteDecision, facts_lines: Sequence[str], source: str, dry_run: bool, err: TextIO) -> None:
    """Every line with its control characters escaped: recipe values, the user's arguments and GGUF strings are
    shown, never acted on by the terminal."""
    lines = [f"{SERVE}: {line}" for line in facts_lines]
    lines.append(DECIDED.format(device=decision.device, profile=decision.profile, source=source))
    lines += [RECIPE_APPLIED.format(id=applied.id, added=applied.added()) for applied in decision.recipes_applied]
    lines += [f"{SERVE}: note: {note}" for note in decision.notes]
    lines += [f"{SERVE}: env {name}={value}" for name, value in decision.env_added]
    lines.append((WOULD_RUN if dry_run else RUNNING).format(command=shlex.join(decision.argv)))
    for line in lines:
        print(printable(line), file=err)


def check_paths(ns: argparse.Namespace) -> None:
    """Every path flag through one check, before any file is read: given as "", missing, a directory, a FIFO or a
    device, it is named with its flag in one line (``--llama-server DIR`` said "no such file", and each reader had
    words of its own)."""
    for flag, value, what in (
        ("-m", ns.model, A_GGUF_FILE),
        ("--dflash", ns.dflash, A_GGUF_FILE),
        ("--mtp", ns.mtp, A_GGUF_FILE),
        ("--recipes", ns.recipes, A_RECIPES_FILE),
        ("--llama-server", ns.llama_server, LLAMA_SERVER),
    ):
        if value is None:
            continue
        if value == "":
            raise UsageError(EMPTY_PATH.format(what=what), flag)
        if flag == "--llama-server" and not server.is_path(value):
            continue  # a name, looked up on PATH by server.from_option
        problem = not_a_file(value, what)
        if problem is not None:
            error = NoServer if flag == "--llama-server" else FileProblem
            raise error(problem, FLAG_PATH.format(flag=flag, path=value))


def serve(argv: Sequence[str], environ: Mapping[str, str], cwd: Path, out: TextIO, err: TextIO) -> int:
    ns, extra = _options(parser(), argv)
    options = RouteOptions(
        model=ns.model,
        device=ns.device,
        profile=ns.profile,
        host=ns.host,
        port=ns.port,
        ctx_size=ns.ctx_size,
        flash_attn=ns.flash_attn,
        dflash=ns.dflash,
        mtp=ns.mtp,
        mtp_max=ns.mtp_max,
        mtp_p_min=ns.mtp_p_min,
        long_model=ns.long_model,
        extra=extra,
    )
    check_options(options)
    check_paths(ns)
    if ns.recipes is not None and ns.no_recipes:
        raise UsageError(RECIPES_AND_NO_RECIPES)
    recipe_set = None if ns.no_recipes else recipes.load(ns.recipes) if ns.recipes is not None else recipes.builtin()
    if recipe_set is not None and ns.skip_recipe:
        unknown = [i for i in ns.skip_recipe if i not in recipe_set.ids]
        if unknown:
            raise UsageError(f"--skip-recipe {unknown[0]}: no such recipe{did_you_mean(unknown[0], recipe_set.ids)} in {recipe_set.name}")
        recipe_set = recipe_set.without(ns.skip_recipe)
    model = read_facts(options.model)
    drafter = read_facts(options.drafter_path) if options.drafter_path else None
    decision = route(model, drafter, options, environ, recipe_set)

    if ns.llama_server is not None:
        found = server.from_option(ns.llama_server, environ)
    else:
        try:
            found = server.from_manifest(decision.profile, cwd, environ, ns.allow_stale)
        except NoBuild as exc:
            if not ns.dry_run:
                raise
            found = server.Server(program=server.BINARY, source=NO_BUILD_YET)
            decision = decision.with_note(LAUNCH_WOULD_STOP.format(problem=exc.problem))
    decision = decision.with_program(found.program)
    if found.warning:
        print(printable(STALE_WARNING.format(stale=found.warning)), file=err)
    judged = _gated(found, environ, ns.require_gated, err)

    facts_lines = [f"{model.path}: {model.describe()}"]
    if drafter is not None:
        facts_lines.append(f"drafter {drafter.path}: {drafter.describe()}")
    _summary(decision, facts_lines, found.source, ns.dry_run, err)
    if ns.dry_run:
        print(json.dumps({**decision.to_json(), "gated": judged.to_json()}), file=out)
        return 0
    err.flush()

    def started(pid: int) -> None:
        print(STARTED.format(pid=pid, host=options.host, port=options.port), file=err)
        err.flush()

    if not ns.require_gated:
        return launch.run(decision.argv, {**environ, **decision.env}, on_start=started)
    return _run_gated(judged, decision, {**environ, **decision.env}, cwd, err, started)


def _run_gated(
    judged: gated.Gated, decision: RouteDecision, environ: Mapping[str, str], cwd: Path, err: TextIO, started: Callable[[int], None]
) -> int:
    """Run exactly what was judged: a private copy of llama-server and its libraries (serve.launch.private_copy), in
    that directory, with it as the only library path and the user's loader variables dropped; paths made absolute."""
    unit, release = judged.unit, judged.judged
    if unit is None or release is None:  # judge() returns both whenever it says "gated"
        raise Refused(NOT_GATED_REFUSED.format(detail=judged.detail), "--require-gated")
    program = launch.Judged(unit.program, gated.PROGRAM, release.llama_server)
    libraries = [launch.Judged(lib.path, lib.name, (release.libraries or {})[lib.name]) for lib in unit.libraries]
    with launch.private_copy(program, libraries, environ) as directory:
        problems = launch.shadowing(directory, gated.root_of(unit.program), [lib.name for lib in libraries])
        if problems:
            raise Refused(problems[0], "--require-gated")
        env, dropped = launch.gated_env(environ, directory)
        if dropped:
            print(printable(f"{SERVE}: note: " + launch.DROPPED.format(names=", ".join(dropped))), file=err)
        print(printable(f"{SERVE}: note: " + launch.PRIVATE.format(count=len(libraries), directory=directory)), file=err)
        err.flush()
        argv = [str(directory / gated.PROGRAM), *flags.absolute_paths(decision.argv[1:], str(cwd))]
        return launch.run(argv, env, on_start=started, cwd=directory)


def _gated(found: server.Server, environ: Mapping[str, str], require: bool, err: TextIO) -> gated.Gated:
    """The llama-server about to run against the release's gated one: a warning when it is not, a refusal under
    ``--require-gated`` (which also refuses when there is no release to compare with)."""
    if found.source == NO_BUILD_YET:
        return gated.Gated("unknown", "no build yet: nothing to compare")
    program = Path(found.program) if os.sep in found.program else Path(shutil.which(found.program, path=environ.get("PATH", os.defpath)) or found.program)
    judged = gated.judge(program, environ)
    if judged.state == "not gated":
        if require:
            raise Refused(NOT_GATED_REFUSED.format(detail=judged.detail), "--require-gated")
        print(printable(NOT_GATED_WARNING.format(detail=judged.detail)), file=err)
    elif judged.state == "no release" and require:
        raise Refused(NO_RELEASE_REFUSED.format(detail=judged.detail, variable=gated.RELEASE_VAR), "--require-gated")
    return judged


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(f"usage: {SERVE} -m MODEL.gguf [options] [-- extra llama-server args]\n\ncommands: serve ({SERVE} --help)")
        return 0 if args else 2
    if args[0] not in COMMANDS:
        problem = UNKNOWN_COMMAND.format(command=args[0], suggestion=did_you_mean(args[0], COMMANDS), commands=", ".join(COMMANDS))
        print(ERROR.format(prog=PROG, problem=problem), file=sys.stderr)
        return 2
    debug = "--debug" in args[1 : args.index("--") if "--" in args else None]
    try:
        return serve(args[1:], os.environ, Path.cwd(), sys.stdout, sys.stderr)
    except ServeError as exc:
        if debug:
            traceback.print_exc()
        print(ERROR.format(prog=SERVE, problem=printable(exc.line)), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # before llama-server started (after, serve forwards the signal and waits)
        return 130
    except Exception as exc:  # a bug: still one line; the traceback with --debug
        if debug:
            traceback.print_exc()
        error = printable(f"{type(exc).__name__}: {exc}"[:300])
        print(ERROR.format(prog=SERVE, problem=INTERNAL_ERROR.format(error=error)), file=sys.stderr)
        return INTERNAL_EXIT
