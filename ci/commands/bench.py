"""``nox -s bench``: A/B measurements of serve configs on a llama-server (``--llama-server``, else the current build
of ``--profile``), interleaved round by round against the first; ``--recipe ID``: a recipe's launch with and
without it, a ``measured:`` line ready to paste (none when the intervals overlap: no change), and with ``--check``
its claim re-judged."""

from __future__ import annotations

import argparse
import datetime
import platform
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ci.command import resolve
from ci.commands import a_folder, absolute, given, job_of, root_or_cwd, say
from ci.commands.job import current
from ci.errors import ConfigError, GateFailed, Refused
from ci.files import kind_of
from ci.gates.perf import judge as perf
from ci.gates.serving import bench
from ci.gates.serving import bench_plan as plans
from ci.gates.serving.model_sets import NO_SUCH_MODEL
from ci.pin.claims import Check, parse_check

# Messages, shared with the tests that match on them (tests/support/messages.py)
SHOWN_COMMAND = "nox -s bench -- {args}"
NO_RECIPE = "--recipe {recipe}: no such recipe{suggestion} in {recipes}"  # suggestion: ci.schema's did-you-mean, or nothing
DOES_NOT_APPLY = (
    "--recipe {recipe}: does not apply to this launch (the model, drafter and device given match none of its "
    "match keys: serve applies {applied}); give the launch it is for (docs/recipes.md)"
)
APPLIES_NONE = "no recipe"  # DOES_NOT_APPLY's applied when serve applies none
NO_CHECK = 'recipe "{recipe}" has no "check" to re-judge; add one (docs/recipes.md) or drop --check'
# the measured line: MEASURED, its parts each a METRIC_CHANGE (or the metric alone) joined by "; ", and ROUNDS
MEASURED = 'measured: "{parts}, {rounds} ({command}, {date}, {host})"'
METRIC_CHANGE = "{metric} {before:.1f} -> {after:.1f} t/s ({change:+.1f}%)"
METRIC_NO_CHANGE = "{metric} {before:.1f} -> {after:.1f} t/s (no change)"  # the two 95% intervals of the median overlap
ROUNDS = "median of {rounds} interleaved rounds, the {protocol} protocol"
# every metric's intervals overlap: no measured line (a paste-ready "+0.4%" had claimed a change nothing showed)
NO_CHANGE = (
    "bench: recipe {recipe}: no change: with and without it the 95% intervals of the median overlap on every metric "
    "({parts}, {rounds}); no measured: line to paste (more --rounds can resolve a small change)"
)
RECIPE_VERDICT = "bench: recipe {recipe}: {verdict}"  # verdict: the perf gate's message of its claim
NOT_WRITABLE = "{what} {path}: {why}; give the path of a file, or a new name"
# no --llama-server: the current build of the profile runs, or one line says why it cannot (bench and equivalence)
OUTSIDE_PROJECT = "{command}: --llama-server PATH is required outside the project (inside it, the current build of --profile runs)"
NO_CURRENT_BUILD = "{command}: no --llama-server, so the current build of profile {profile} runs, and {why}; or give --llama-server PATH"
CLAIM_BROKEN = "bench: recipe {recipe}: its claim no longer holds ({claim}); re-measure it or drop the recipe"


def check_outputs(logs: Path, json_out: Path | None) -> None:
    """Before any round: where the logs, the JSON and its chart go can take them. After a whole run, --json /dev/full
    had replaced the device with a regular file, and --logs FILE ended in "File exists"."""
    a_folder(logs, "--logs", "the servers' logs")
    for what, path in (("--json", json_out), ("--json's chart", json_out.with_suffix(".svg") if json_out else None)):
        why = kind_of(path) if path is not None else None
        if why is not None:
            raise ConfigError(NOT_WRITABLE.format(what=what, path=path, why=why))


def main(args: argparse.Namespace) -> int:
    target = recipe_target(args.recipe, absolute(args.recipes), args.check) if args.recipe else None
    configs = recipe_configs(args.recipe, args.args or "", absolute(args.recipes)) if args.recipe else [plans.parse_config(c) for c in args.config]
    if args.llama_server:
        llama_server, device, root = Path(resolve(args.llama_server)), args.device or "auto", root_or_cwd(args)
    else:
        built = build_llama_server(args, args.profile, "bench")
        llama_server, device, root = built.path, args.device or built.device, built.root
    if not Path(args.model).is_file():
        raise ConfigError(NO_SUCH_MODEL.format(option="-m", path=args.model))
    bench_plan = plans.plan(
        model=Path(args.model).resolve(), llama_server=llama_server, configs=configs, device=device,
        rounds=args.rounds, prompt_reps=args.prompt_reps, decode_reps=args.decode_reps, decode_tokens=args.decode_tokens,
        prompt_tokens=args.prompt_tokens, context=args.ctx_size, warmup_tokens=args.warmup_tokens, protocol=args.protocol,
    )  # fmt: skip
    logs = given(args.logs) or root / "build" / "bench" / "logs"
    check_outputs(logs, given(args.json))
    if target is not None:
        shown = SHOWN_COMMAND.format(args=shlex.join(sys.argv[sys.argv.index("bench") + 1 :] if "bench" in sys.argv else ["--recipe", args.recipe]))
        return recipe_session(bench_plan, target, logs, lock_of(args), given(args.json), shown)
    bench.measure(bench_plan, logs, lock_of(args), given(args.json), say)
    return 0


def lock_of(args: argparse.Namespace) -> Path | None:
    """The lock the whole run holds: ``--lock PATH``, none with ``--no-lock``, else the box lock the perf gate holds
    (:func:`~ci.gates.serving.bench.box_lock_path`), so a bench and a gate never measure one box at once."""
    if args.no_lock:
        return None
    return given(args.lock) or bench.box_lock_path()


@dataclass(frozen=True)
class BuildServer:
    """The current build's llama-server for a profile, as a command that was given no ``--llama-server`` runs it."""

    path: Path
    device: str  # the profile's serve device
    root: Path  # the project's
    profile: str
    key: str  # the build key
    sha256: str  # llama-server's, from build.json


def build_llama_server(args: argparse.Namespace, profile: str | None, command: str) -> BuildServer:
    """The current build of ``profile`` (None: the job's, ``$ONEBIT_PROFILE`` else the default) and its llama-server;
    one line naming the way out when there is no project, no build, or a stale one."""
    from ci.commands.main_job import PROFILE_VAR
    from ci.compile.profiles import DEFAULT_PROFILE

    try:
        job = job_of(args)
    except ConfigError:
        raise ConfigError(OUTSIDE_PROJECT.format(command=command)) from None
    name = profile or job.env.get(PROFILE_VAR) or DEFAULT_PROFILE
    try:
        build = current(job, name)
        path = build.manifest.binary(build.build_dir, "llama-server")
    except Refused as exc:
        raise Refused(NO_CURRENT_BUILD.format(command=command, profile=name, why=exc.message)) from None
    return BuildServer(path, job.profile(name).serve_device, job.root, name, build.manifest.key, build.manifest.binaries["llama-server"].sha256)


# -- a recipe re-measured ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecipeTarget:
    """The recipe to re-measure, and its claim when ``--check`` asks for it: both settled before anything runs."""

    id: str
    claim: Check | None


def recipe_target(recipe_id: str, recipes_file: Path | None, check: bool) -> RecipeTarget:
    from serve.recipes import builtin, load

    recipe_set = load(str(recipes_file)) if recipes_file else builtin()
    recipe = next((r for r in recipe_set.recipes if r.id == recipe_id), None)
    if recipe is None:
        from ci.schema import did_you_mean

        raise ConfigError(NO_RECIPE.format(recipe=recipe_id, suggestion=did_you_mean(recipe_id, recipe_set.ids), recipes=recipe_set.name))
    if not check:
        return RecipeTarget(recipe_id, None)
    if not recipe.check:
        raise ConfigError(NO_CHECK.format(recipe=recipe_id))
    return RecipeTarget(recipe_id, parse_check(recipe.check, recipe.measured, 0.1, f'recipe "{recipe_id}": check', configs=("with", "without")))


def recipe_configs(recipe_id: str, args: str, recipes_file: Path | None) -> list[plans.BenchConfig]:
    """The recipe's launch with and without it: ``with`` is serve with every recipe that matches (this one among
    them), ``without`` the same with ``--skip-recipe ID``; ``args`` (the drafter, a device) go to both."""
    own = f"--recipes {shlex.quote(str(recipes_file))} " if recipes_file else ""
    return [plans.parse_config(f"without={own}--skip-recipe {recipe_id} {args}".strip()), plans.parse_config(f"with={own}{args}".strip())]


def overlaps(a: bench.Figure, b: bench.Figure) -> bool:
    """Whether the two figures' 95% intervals of the median overlap: no change shown (a figure without one: shown)."""
    if a.spread is None or b.spread is None:
        return False
    return a.spread.low <= b.spread.high and b.spread.low <= a.spread.high


def measured_line(
    recipe: str, metrics: Sequence[str], figures: Sequence[bench.Figure], rounds: int, command: str, date: str, host: str, protocol: str
) -> str:
    """The ``measured:`` line to paste into the recipe, each metric's change, or "no change" where the intervals
    overlap; when they overlap on every metric, the line that says so in its place (pure)."""
    by = {(f.config, f.metric): f for f in figures}
    parts, changed = [], False
    for metric in metrics:
        a, b = by.get(("without", metric)), by.get(("with", metric))
        if not (a and b):
            continue
        if overlaps(a, b):
            parts.append(METRIC_NO_CHANGE.format(metric=metric, before=a.median, after=b.median))
            continue
        changed = True
        parts.append(METRIC_CHANGE.format(metric=metric, before=a.median, after=b.median, change=100 * (b.median / a.median - 1)) if a.median else metric)
    shown = ROUNDS.format(rounds=rounds, protocol=protocol)
    if not changed:
        return NO_CHANGE.format(recipe=recipe, parts="; ".join(parts), rounds=shown)
    return MEASURED.format(parts="; ".join(parts), rounds=shown, command=command, date=date, host=host)


def recipe_session(
    bench_plan: plans.BenchPlan, target: RecipeTarget, logs: Path, lock: Path | None, json_out: Path | None, command: str
) -> int:
    """``nox -s bench -- --recipe ID -m MODEL``: with and without the recipe, interleaved; a ``measured:`` line ready
    to paste into the recipe; with ``--check``, its claim re-judged (exit 7 when it no longer holds)."""
    applied: dict[str, tuple[str, ...]] = {}
    plans.check_configs(bench_plan, applied)
    if target.id not in applied.get("with", ()):  # the two configs would be one: a measured line of noise
        raise ConfigError(DOES_NOT_APPLY.format(recipe=target.id, applied=", ".join(applied.get("with", ())) or APPLIES_NONE))
    result, figures = bench.measure(bench_plan, logs, lock, json_out, say)
    say(measured_line(target.id, bench_plan.metrics, figures, bench_plan.rounds, command, datetime.date.today().isoformat(), platform.node(), bench_plan.protocol))
    if target.claim is None:
        return 0
    judged = perf.judge_check(target.claim, perf.per_round(target.claim, result.samples), None, "")
    say(RECIPE_VERDICT.format(recipe=target.id, verdict=judged.message))
    if not judged.status.ok:
        raise GateFailed(CLAIM_BROKEN.format(recipe=target.id, claim=target.claim.text))
    return 0
