"""``nox -s equivalence``: the greedy-equivalence gate alone, on a llama-server (``--llama-server``, else the current
build of ``--profile``) and two models (JSON and JUnit, no ledger). ``tiny-models``: the generated models the gate runs when pins.yaml names none, both sets, from one command."""

from __future__ import annotations

import argparse
from pathlib import Path

from ci.commands import a_folder, given, root_or_cwd, say
from ci.commands.bench import build_llama_server
from ci.gates.equivalence import plan as eq_plan
from ci.gates.equivalence import run as equivalence
from ci.gates.serving.prompts import load_prompts
from ci.gates.tiny.models import write_qwen35_models, write_tiny_models
from ci.release import records


def main(args: argparse.Namespace) -> int:
    """The gate on ``--llama-server``, or, without it, on the current build of ``--profile`` (the job's by default),
    as the README's ``nox -s equivalence -- --model M --drafter D`` runs it: it had looked for llama-server on PATH."""
    given_server = getattr(args, "llama_server", None)
    device = getattr(args, "device", None)
    if given_server:
        llama_server: Path | str = given_server  # as typed: the plan looks it up once the models are known to be there
        build_key, server_sha256, root = args.build_key, None, root_or_cwd(args)
        device = device or "auto"
    else:
        built = build_llama_server(args, getattr(args, "profile", None), "equivalence")
        llama_server, build_key, server_sha256, root = built.path, args.build_key or built.key, built.sha256, built.root
        device = device or built.device
    out = a_folder(given(args.out) or root / "build" / "gates", "--out", "the gate's JSON, JUnit and server logs")
    prompts = load_prompts(Path(args.prompts)) if args.prompts else None
    equivalence_plan = eq_plan.plan(
        model=Path(args.model), drafter=Path(args.drafter), llama_server=llama_server, spec_type=args.spec_type,
        prompts=prompts, tokens=args.tokens, near_tie=args.near_tie, device=device, context=args.ctx_size, build_key=build_key,
        llama_server_sha256=server_sha256,
    )  # fmt: skip
    return records.one_gate(equivalence.run(equivalence_plan, out / "equivalence-logs"), out, say)


def tiny_models(args: argparse.Namespace) -> int:
    folder = a_folder(Path(args.out), "--out", "the tiny models")
    models = write_tiny_models(folder)
    qwen35 = write_qwen35_models(folder)
    say(f"tiny-models: wrote {models.target.name}, {models.near_drafter.name} (the default drafter), {models.drafter.name} and {models.other_target.name} in {args.out}")
    say(models.describe())
    say(f"tiny-models: wrote {qwen35.target.name} with {qwen35.near_drafter.name}, {qwen35.dflash.name} and {qwen35.mtp.name} (the engine's class) in {args.out}")
    say(qwen35.describe())
    return 0
