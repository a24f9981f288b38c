"""``nox -s bench``: A/B measurements of serve configs on a llama-server (``--llama-server``, else the current build
of ``--profile``), interleaved round by round against the first; ``--recipe ID``: a recipe's launch with and
without it, a ``measured:`` line ready to paste, and with ``--check`` its claim re-judged."""

from __future__ import annotations

import argparse
import datetime
import platform
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from ci.command import resolve
from ci.commands import a_folder, absolute, given, job_of, root_or_cwd, say
from ci.commands.job import current
from ci.errors import ConfigError, GateFailed
from ci.files import kind_of
from ci.gates.equivalence import plan as eq_plan
from ci.gates.perf import judge as perf
from ci.gates.serving import bench
from ci.gates.serving import bench_plan as plans
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
ROUNDS = "median of {rounds} interleaved rounds"
RECIPE_VERDICT = "bench: recipe {recipe}: {verdict}"  # verdict: the perf gate's message of its claim
NOT_WRITABLE = "{what} {path}: {why}; give the path of a file, or a new name"
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
        llama_server, profile_device, root = llama_server_of(args, args.profile)
        device = args.device or profile_device
    if not Path(args.model).is_file():
        raise ConfigError(eq_plan.NO_SUCH_MODEL.format(option="-m", path=args.model))
    bench_plan = plans.plan(
        model=Path(args.model).resolve(), llama_server=llama_server, configs=configs, device=device,
        rounds=args.rounds, prompt_reps=args.prompt_reps, decode_reps=args.decode_reps, decode_tokens=args.decode_tokens,
        prompt_tokens=args.prompt_tokens, context=args.ctx_size, warmup_tokens=args.warmup_tokens,
    )  # fmt: skip
    logs = given(args.logs) or root / "build" / "bench" / "logs"
    check_outputs(logs, given(args.json))
    if target is not None:
        shown = SHOWN_COMMAND.format(args=shlex.join(sys.argv[sys.argv.index("bench") + 1 :] if "bench" in sys.argv else ["--recipe", args.recipe]))
        return recipe_session(bench_plan, target, logs, given(args.lock), given(args.json), shown)
    bench.measure(bench_plan, logs, given(args.lock), given(args.json), say)
    return 0


def llama_server_of(args: argparse.Namespace, profile: str) -> tuple[Path, str, Path]:
    """The current build's llama-server for ``profile``, its serve device, and the project's root."""
    try:
        job = job_of(args)
    except ConfigError:
        raise ConfigError("--llama-server PATH is required outside the project (inside it, the current build of --profile runs)") from None
    build = current(job, profile)
    return build.manifest.binary(build.build_dir, "llama-server"), job.profile(profile).serve_device, job.root




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
    by = {(f.config, f.metric): f for f in figures}
    parts = []
    for metric in bench_plan.metrics:
        a, b = by.get(("without", metric)), by.get(("with", metric))
        if a and b:
            parts.append(METRIC_CHANGE.format(metric=metric, before=a.median, after=b.median, change=100 * (b.median / a.median - 1)) if a.median else metric)
    rounds = ROUNDS.format(rounds=bench_plan.rounds)
    say(MEASURED.format(parts="; ".join(parts), rounds=rounds, command=command, date=datetime.date.today().isoformat(), host=platform.node()))
    if target.claim is None:
        return 0
    judged = perf.judge_check(target.claim, perf.per_round(target.claim, result.samples), None, "")
    say(RECIPE_VERDICT.format(recipe=target.id, verdict=judged.message))
    if not judged.status.ok:
        raise GateFailed(CLAIM_BROKEN.format(recipe=target.id, claim=target.claim.text))
    return 0
