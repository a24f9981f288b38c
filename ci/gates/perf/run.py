"""The perf gate's run: the bench, interleaved, on the build's llama-server, then :mod:`ci.gates.perf.judge`'s judgement."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from ci import defaults
from ci.errors import ConfigError
from ci.files import write_json
from ci.gates.equivalence import engine_path
from ci.gates.equivalence import plan as eq_plan
from ci.gates.perf import judge as perf
from ci.gates.results import GateResult, case_counts
from ci.gates.serving import bench
from ci.gates.serving import bench_plan as plans
from ci.gates.serving.bench import Sample
from ci.gates.target import BuildUnderTest, GateOptions, equivalence_models
from ci.schema import load_json

# Messages, shared with the tests that match on them (tests/support/messages.py)
CHART_TITLE = "perf: {profile}, pin {pin}, {models} ({rounds} rounds)"


def run(target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
    t0 = time.monotonic()
    manifest = target.build.manifest
    model, drafter, models = equivalence_models(target, options)
    key = manifest.profile if models == eq_plan.RELEASE_MODELS else "tiny"
    checks = target.pins.perf_checks(key)
    if not checks:
        raise ConfigError(f"pins.yaml: expect.perf.{key}: no checks for {models}; declare them (docs/bench.md)")
    device = target.serve_device
    server = manifest.binary(target.build.build_dir, "llama-server")
    released = target.last_release(models)
    tiny = models == eq_plan.TINY_MODELS
    runs = iter(("perf", "perf-more"))

    def measure_rounds(rounds: int) -> list[Sample]:
        return measure(model, drafter, server, device, rounds, tiny, out, next(runs))

    judged, _, rounds = perf.judge_settled(checks, measure_rounds, options.rounds, released, manifest.pin_commit)
    title = CHART_TITLE.format(profile=manifest.profile, pin=manifest.pin_commit[:7], models=models, rounds=rounds)
    drawn = perf.chart(judged, out / "perf.svg", title)
    result = perf.result(judged, released, manifest.pin_commit, models, time.monotonic() - t0)
    chart = str(out / "perf.svg") if drawn else bench.NO_CHART
    # one line per drafter kind of the engine-path equivalence run on this build (gpu_tests runs it before perf)
    record = load_json(out / "equivalence.json") if (out / "equivalence.json").is_file() else None
    cases = (*result.cases, *engine_path.drafter_lines(record))
    return dataclasses.replace(result, cases=cases, counts=case_counts(cases), properties=(*result.properties, ("chart", chart), ("rounds", str(rounds))))


def measure(model: Path, drafter: Path, llama_server: Path, device: str, rounds: int, tiny: bool, out: Path, name: str = "perf") -> list[Sample]:
    """The bench, base and drafter interleaved for ``rounds`` rounds; every sample, also in ``out/NAME-samples.json``."""
    if eq_plan.gguf_architecture(drafter) == "dflash":
        draft = plans.parse_config(f"draft=--dflash {drafter}")
    else:
        draft = plans.parse_config(f"draft=-- -md {drafter} --spec-type draft-simple {' '.join(eq_plan.DRAFT_ARGS)}")
    bench_plan = plans.plan(
        model=model,
        llama_server=llama_server,
        configs=[plans.parse_config("base="), draft],
        device=device,
        rounds=rounds,
        prompt_tokens=1000 if tiny else plans.DEFAULT_PROMPT_TOKENS,
        context=defaults.CONTEXT if tiny else plans.DEFAULT_CONTEXT,
        decode_reps=1,
        prompt_reps=3,
    )
    result = bench.run(bench_plan, out / f"{name}-logs", lambda line: None)
    write_json(out / f"{name}-samples.json", bench.to_json(result, bench.summarise(bench_plan, result.samples)))
    return list(result.samples)
