"""The perf gate's run: the bench, interleaved, on the build's llama-server, in batches of rounds until
:mod:`ci.gates.perf.judge`'s sequential test settles every check or its budget runs out."""

from __future__ import annotations

import dataclasses
import shlex
import time
from collections.abc import Sequence
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
from ci.gates.serving.bench import BenchResult, Sample
from ci.gates.target import BuildUnderTest, GateOptions, equivalence_models
from ci.schema import load_json

# Messages, shared with the tests that match on them (tests/support/messages.py)
CHART_TITLE = "perf: {profile}, pin {pin}, {models} ({rounds} rounds)"

# llama-server's threads for the tiny models on the CPU: with its default (one per core) a 256-token decode on 2
# shared cores took from 11 to 6,400 t/s, one thread stalled waiting for the other; with one thread the same rounds'
# ratios stayed within 0.22-0.32 (decode) and 0.45-0.61 (prompt) where two threads gave 0.25-4.08 and 0.26-1.06
# (docs/bench.md, "How many rounds")
CPU_THREADS = ("-t", "1")


def run(target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
    t0 = time.monotonic()
    manifest = target.build.manifest
    model, drafter, models = equivalence_models(target, options)
    key = manifest.profile if models == eq_plan.RELEASE_MODELS else "tiny"
    checks = target.pins.perf_checks(key)
    if not checks:
        raise ConfigError(f"pins.yaml: expect.perf.{key}: no checks for {models}; declare them (docs/bench.md)")
    server = manifest.binary(target.build.build_dir, "llama-server")
    released = target.last_release(models)
    tiny = models == eq_plan.TINY_MODELS
    batches: list[BenchResult] = []

    def measure_rounds(rounds: int) -> list[Sample]:
        batch = bench.run(plan(model, drafter, server, target.serve_device, rounds, tiny), out / "perf-logs" / f"batch{len(batches) + 1}", lambda line: None)
        batches.append(batch)
        write_samples(joined(batches), out / "perf-samples.json")  # every sample so far, should a later batch fail
        return list(batch.samples)

    budget = perf.Budget(max_rounds=options.rounds, seconds=defaults.PERF_SECONDS)
    settled = perf.judge_settled(checks, measure_rounds, budget, released, manifest.pin_commit)
    title = CHART_TITLE.format(profile=manifest.profile, pin=manifest.pin_commit[:7], models=models, rounds=settled.rounds)
    drawn = perf.chart(settled.judged, out / "perf.svg", title)
    result = perf.result(settled.judged, released, manifest.pin_commit, models, time.monotonic() - t0, settled.rounds, settled.stopped)
    chart = str(out / "perf.svg") if drawn else bench.NO_CHART
    # one line per drafter kind of the engine-path equivalence run on this build (gpu_tests runs it before perf)
    record = load_json(out / "equivalence.json") if (out / "equivalence.json").is_file() else None
    cases = (*result.cases, *engine_path.drafter_lines(record))
    return dataclasses.replace(result, cases=cases, counts=case_counts(cases), properties=(*result.properties, ("chart", chart)))


def configs(drafter: Path, device: str, tiny: bool) -> list[plans.BenchConfig]:
    """``base`` and ``draft`` (the drafter through ``--dflash`` for a DFlash GGUF, else ``-md``), one thread each for
    the tiny models on the CPU."""
    threads = list(CPU_THREADS) if tiny and device == "cpu" else []
    if eq_plan.gguf_architecture(drafter) == "dflash":
        draft = ["--dflash", str(drafter), *(["--", *threads] if threads else [])]
    else:
        draft = ["--", "-md", str(drafter), "--spec-type", "draft-simple", *eq_plan.DRAFT_ARGS, *threads]
    return [plans.parse_config("base=" + shlex.join(["--", *threads] if threads else [])), plans.parse_config("draft=" + shlex.join(draft))]


def plan(model: Path, drafter: Path, llama_server: Path, device: str, rounds: int, tiny: bool) -> plans.BenchPlan:
    """The bench of ``rounds`` rounds, base and the drafter interleaved, as the gate measures them."""
    return plans.plan(
        model=model,
        llama_server=llama_server,
        configs=configs(drafter, device, tiny),
        device=device,
        rounds=rounds,
        prompt_tokens=1000 if tiny else plans.DEFAULT_PROMPT_TOKENS,
        context=defaults.CONTEXT if tiny else plans.DEFAULT_CONTEXT,
        decode_reps=1,
        prompt_reps=3,
    )


def joined(batches: Sequence[BenchResult]) -> BenchResult:
    """Batches of rounds as one run: each batch's rounds numbered after the ones before (as
    :func:`ci.gates.perf.judge.more_rounds` numbers them), its servers too."""
    samples: list[Sample] = []
    servers: list[bench.ServerRun] = []
    offset = 0
    for b in batches:
        samples += [dataclasses.replace(s, round=s.round + offset) for s in b.samples]
        servers += [dataclasses.replace(s, round=s.round + offset) for s in b.servers]
        offset += b.plan.rounds
    first, last = batches[0], batches[-1]
    return BenchResult(dataclasses.replace(first.plan, rounds=offset), tuple(samples), tuple(servers), first.started, last.finished, sum(b.seconds for b in batches))


def write_samples(result: BenchResult, path: Path) -> None:
    write_json(path, bench.to_json(result, bench.summarise(result.plan, result.samples)))


def measure(model: Path, drafter: Path, llama_server: Path, device: str, rounds: int, tiny: bool, out: Path, name: str = "perf") -> list[Sample]:
    """The bench, base and drafter interleaved for ``rounds`` rounds in one batch; every sample, also in
    ``out/NAME-samples.json``."""
    result = bench.run(plan(model, drafter, llama_server, device, rounds, tiny), out / f"{name}-logs", lambda line: None)
    write_samples(result, out / f"{name}-samples.json")
    return list(result.samples)
