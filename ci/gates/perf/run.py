"""The perf gate's run: the bench, interleaved, on the build's llama-server, in batches of rounds until
:mod:`ci.gates.perf.judge`'s sequential test settles every check or its budget runs out; then, where pins.yaml declares
checks of the real-shaped set for the profile, that set (:mod:`ci.gates.perf.real_shape`). The whole run holds the
box lock, as the seeds' bench did: two measurements on one machine never overlap."""

from __future__ import annotations

import dataclasses
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ci import defaults
from ci.errors import ConfigError
from ci.files import write_json
from ci.gates.perf import NAME, real_shape, spec
from ci.gates.perf import judge as perf
from ci.gates.results import GateResult, Status, case_counts
from ci.gates.serving import bench, devices
from ci.gates.serving import bench_plan as plans
from ci.gates.serving.bench import BenchResult, Sample
from ci.gates.serving.model_sets import RELEASE_MODELS, TINY_MODELS, drafter_launch, served_models
from ci.gates.serving.protocol import COMPLETION, DECODE_PROMPTS, PROTOCOLS
from ci.gates.target import BuildUnderTest, GateOptions
from ci.pin.claims import Check

# Messages, shared with the tests that match on them (tests/support/messages.py)
CHART_TITLE = "perf: {profile}, pin {pin}, {models} ({rounds} rounds)"
NO_CHECKS = "pins.yaml: expect.perf: no checks for {models} ({key}) nor expect.perf.{real}; declare them (docs/bench.md)"
REAL_SHAPE_CASE = "real-shape: {name}"  # a real-shaped set's check among the gate's cases and figures
REAL_SHAPE_SUMMARY = "; real-shape ({set}, {device}): {held}/{checks} checks hold ({rounds} rounds)"

SHAPE_SET = {"cpu": "reduced"}  # the real-shaped set a profile runs: the full 27B shapes, the reduced on the CPU
# the reduced set on a 2-core CPU: the seeds' requests, shorter (a 4-layer 27B-wide target prefills about 40 t/s there)
CPU_PROTOCOL = real_shape.Protocol(prompt_tokens=512, long_tokens=2048, decode_tokens=32, threads=("-t", "2"))

# llama-server's threads for the tiny models on the CPU: with its default (one per core) a 256-token decode on 2
# shared cores took from 11 to 6,400 t/s, one thread stalled waiting for the other; with one thread the same rounds'
# ratios stayed within 0.22-0.32 (decode) and 0.45-0.61 (prompt) where two threads gave 0.25-4.08 and 0.26-1.06
# (docs/bench.md, "How many rounds")
CPU_THREADS = ("-t", "1")
LastRelease = tuple[str, Mapping[str, Any]] | None  # released(NAME)'s: the last release's pin and perf record


def run(target: BuildUnderTest, options: GateOptions, out: Path, say: Callable[[str], None] = lambda line: None) -> GateResult:
    """The checks of the models a run serves (the release's, else the tiny set: :func:`served_models`) and of the
    real-shaped set, as pins.yaml declares them for this profile; one record of both."""
    expect = spec.expectations(target.pins)
    profile = target.build.manifest.profile
    model, drafter, models = served_models(target, options)
    key = profile if models == RELEASE_MODELS else spec.TINY
    checks, real = expect.checks(key), expect.real_shape(profile)
    if not checks and not real:
        raise ConfigError(NO_CHECKS.format(key=key, models=models, real=spec.real_shape_key(profile).replace("/", ".")))
    with bench.box_lock(bench.box_lock_path(), say):
        last = target.released(NAME)  # the last release's perf record, read once for both sets
        result = _run_models(target, options, out, (model, drafter, models), checks, last) if checks else None
        if not real:
            assert result is not None
            return result
        shaped = named_real_shape(run_real_shape(target, options, real, out, say, last))
        return joined_results(result, shaped) if result is not None else shaped


def _run_models(
    target: BuildUnderTest, options: GateOptions, out: Path, served: tuple[Path, Path, str], checks: Sequence[Check], last: LastRelease
) -> GateResult:
    t0 = time.monotonic()
    manifest = target.build.manifest
    model, drafter, models = served
    server = manifest.binary(target.build.build_dir, "llama-server")
    released = perf.released_figures(last, models)
    tiny = models == TINY_MODELS
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
    return dataclasses.replace(result, properties=(*result.properties, ("chart", chart), ("protocol", PROTOCOLS[COMPLETION])))


def run_real_shape(
    target: BuildUnderTest, options: GateOptions, checks: Sequence[Check], out: Path, say: Callable[[str], None], last: LastRelease
) -> GateResult:
    """The real-shaped set's checks for this profile: its files written here (cached by their spec), its legs in
    groups of live servers, each group's checks settled by the sequential test."""
    from ci.gates.shapes import models as shapes
    from ci.gates.shapes.bandwidth import decode_bytes
    from ci.gates.shapes.vocab import chat_prompt_text, real_vocab

    t0 = time.monotonic()
    manifest = target.build.manifest
    profile = manifest.profile
    server = manifest.binary(target.build.build_dir, "llama-server")
    device = target.serve_device
    described = devices.described(server, device)
    peak = real_shape.peak_or_refuse(described, devices.peak_bandwidth(described), checks)
    protocol = CPU_PROTOCOL if profile == "cpu" else real_shape.Protocol()
    shape_set = shapes.shape_set(SHAPE_SET.get(profile, "real"))
    files = shapes.write_set(shape_set, roles=real_shape.roles_of(checks), say=say)
    vocab = real_vocab(shape_set.vocab_size)
    prompts = {"prompt": chat_prompt_text(protocol.prompt_tokens, vocab)}
    if any(t is not None and t.prompt == real_shape.LONG_PROMPT for c in checks for t in (c.top, c.bottom)):
        prompts[real_shape.prompt_metric(real_shape.LONG_PROMPT)] = chat_prompt_text(protocol.long_tokens, vocab)
    prompts.update({f"decode {name}": text for name, text in DECODE_PROMPTS.items()})
    per_tps = {role: decode_bytes(path).per_token / peak for role, path in files.files.items() if peak}
    models = real_shape.Models(files.files, prompts, per_tps)
    prefix = REAL_SHAPE_CASE.format(name="")
    released = perf.released_figures(last, "", prefix)
    budget = perf.Budget(max_rounds=options.rounds, seconds=real_shape.SECONDS)

    def judge(group_checks: Sequence[Check], measure: Callable[[int], Sequence[Sample]]) -> perf.Settled:
        return perf.judge_settled(group_checks, measure, budget, released, manifest.pin_commit)

    settled = real_shape.settle_groups(checks, models, server, device, protocol, out / "perf-real-shape", judge, say)
    judged = [j for s in settled for j in s.judged]
    write_json(out / "perf-real-shape-samples.json", {"protocol": protocol.describe(), "device": described, "set": shape_set.name,
                                                        "samples": [x.to_json() for s in settled for x in s.samples]})  # fmt: skip
    rounds = max((s.rounds for s in settled), default=0)
    stopped = next((s.stopped for s in settled if s.stopped), None)
    title = CHART_TITLE.format(profile=profile, pin=manifest.pin_commit[:7], models=f"real-shape {shape_set.name}", rounds=rounds)
    perf.chart(judged, out / "perf-real-shape.svg", title)
    result = perf.result(judged, released, manifest.pin_commit, f"real-shape {shape_set.name}", time.monotonic() - t0, rounds, stopped)
    properties = (("real_shape", shape_set.name), ("real_shape_device", described), ("real_shape_protocol", protocol.describe()))
    return dataclasses.replace(result, properties=(*result.properties, *properties))


def named_real_shape(real: GateResult) -> GateResult:
    """The real-shaped set's result with its cases and figures named by :data:`REAL_SHAPE_CASE`, as they are kept
    beside another set's in one record (and as :func:`~ci.gates.perf.judge.released_figures` reads them back)."""
    prefix = REAL_SHAPE_CASE.format(name="")
    cases = tuple(dataclasses.replace(c, name=prefix + c.name) for c in real.cases)
    return dataclasses.replace(real, cases=cases, metrics=tuple((prefix + k, v) for k, v in real.metrics))


def joined_results(main: GateResult, real: GateResult) -> GateResult:
    """One record of both sets: the main set's, then the real-shaped set's (named by :func:`named_real_shape`)."""
    cases = (*main.cases, *real.cases)
    props = dict(real.properties)
    held = sum(c.status.ok for c in real.cases)
    summary = main.summary + REAL_SHAPE_SUMMARY.format(set=props.get("real_shape", ""), device=props.get("real_shape_device", ""), held=held, checks=len(real.cases), rounds=props.get("rounds", ""))
    statuses = (main.status, real.status)
    status = Status.PASSED if all(s is Status.PASSED for s in statuses) else Status.ERROR if Status.ERROR in statuses else Status.FAILED
    properties = (*main.properties, *((k, v) for k, v in real.properties if k.startswith("real_shape")))
    return dataclasses.replace(main, status=status, summary=summary, cases=cases, counts=case_counts(cases), problems=(*main.problems, *real.problems),
                               metrics=(*main.metrics, *real.metrics), properties=properties, seconds=main.seconds + real.seconds)  # fmt: skip


def configs(drafter: Path, device: str, tiny: bool) -> list[plans.BenchConfig]:
    """``base`` and ``draft`` (the drafter launched as every gate launches one: :func:`drafter_launch`, through
    ``--dflash`` for a DFlash GGUF, else ``-md``), one thread each for the tiny models on the CPU."""
    threads = list(CPU_THREADS) if tiny and device == "cpu" else []
    launch = drafter_launch(drafter)
    after = [*launch.extra, *threads]
    draft = [*launch.serve_options, *(["--", *after] if after else [])]
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
