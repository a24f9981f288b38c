"""The equivalence gate on the engine's own path: a qwen35 target with each drafter kind the engine can run (``near``,
``dflash``, ``mtp``), each leg judged by :mod:`ci.gates.equivalence.run` with floors of its own kind, and the
``llama`` target's leg, whose KV cache rollback no qwen35 leg reaches. Only the MTP leg reaches per-token
snapshot rollback. ``dflash-whole`` runs the DFlash leg again with each prompt in one micro-batch, and the
``dflash-context`` cases compare the two legs' drafts, which differ when the drafter's layer inputs are misplaced
(docs/equivalence.md, "The engine's path").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ci import defaults
from ci.gates.equivalence import plan as eq_plan
from ci.gates.equivalence import run as equivalence
from ci.gates.equivalence.plan import EquivalencePlan
from ci.gates.equivalence.run import GATE
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.gates.serving.model_sets import MTP_SPEC_TYPE, TINY_MODELS
from ci.gates.tiny import models as tinymodels
from ci.pin.pins import Floors

# every prompt spans several micro-batches: the chunked delta-net prefill, its snapshot writes and the layer inputs'
# micro-batch offsets all run
MICRO_BATCH = ("-b", "64", "-ub", "16")
ONE_MICRO_BATCH = ("-b", "2048", "-ub", "2048")  # every prompt and its 256 tokens fit the servers' context of 2048
NEAR, DFLASH, DFLASH_WHOLE, MTP, LLAMA = "near", "dflash", "dflash-whole", "mtp", "llama"
CONTEXT = "dflash-context"
# Drafts that may differ between the two DFlash legs on a GPU, whose kernels round differently per batch shape. On
# the H200 (c14872f with the offset fix) the largest gap seen was 0.0107 (CUDA0, code: 146/217 against 145/219);
# on Vulkan0 the two legs' totals were the same (432/664), and the CPU drafts exactly the same (docs/equivalence.md).
GPU_ACCEPTANCE_SLACK = 0.02
# The DFlash leg drafts 2 tokens a step and its drafter is built, not trained (docs/equivalence.md): on the CPU it had
# 191 of 1141 drafts accepted (16.7%), 57-74 per prompt, so the near drafter's run floor (0.1) holds with a margin but
# the per-prompt floors are halved beside the near leg's hundreds.
DFLASH_FLOORS = Floors(accepted=defaults.FLOOR_ACCEPTED // 2, rejected=defaults.FLOOR_REJECTED, acceptance=defaults.FLOOR_ACCEPTANCE)
# The MTP head is built too (tiny_qwen35.mtp_weights): on the CPU 66-81 of 345-376 drafts per prompt accepted
# (17.6-23.5%), well above the default floors, which it runs on.
MTP_FLOORS = Floors()

# Messages, shared with the tests that match on them (tests/support/messages.py)
SUMMARY = "{status}: {legs}"
LEG_SUMMARY = "{kind}: {summary}"
# where a dflash-context failure is explained, and the step that fixes it at c14872f (tests/docs checks the anchors)
OFFSET_SECTION = "docs/gates.md#what-each-check-reaches"
CARRY_OFFSET_FIX = (
    "carry upstream's offset line (dst_offset = token_offset * (nfloats / n_tokens)) as a patch of the series "
    "(docs/patches.md#add-a-patch; the steps: docs/gates.md#nox--s-gate_selftest-gates-that-can-fail), then rebuild and rerun"
)
DRAFTED_DIFFERENTLY_COUNT = "{kind}: {count} prompt(s) drafted differently (the layer inputs' micro-batch offset: " + OFFSET_SECTION + ")"
NOT_COMPARED = "not compared: the {leg} leg did not pass"
DRAFTS = "drafted {split_drafted}, {split_accepted} accepted with 16-token micro-batches; {whole_drafted}, {whole_accepted} with the prompt in one"
DRAFTED_DIFFERENTLY = (
    "{drafts}: the DFlash drafter was given other layer inputs when the prompt spanned micro-batches "
    "(stale or misplaced; llama_context::extract_layer_inputs writes them, at c14872f every micro-batch's at offset 0: "
    + OFFSET_SECTION
    + "); "
    + CARRY_OFFSET_FIX
)


@dataclass(frozen=True)
class EngineLeg:
    kind: str  # NEAR, DFLASH, DFLASH_WHOLE, MTP or LLAMA
    plan: EquivalencePlan


def with_micro_batch(p: EquivalencePlan, batch: tuple[str, ...] = MICRO_BATCH) -> EquivalencePlan:
    """``p`` with both legs' llama-servers on ``batch`` (default: 64-token batches of 16-token micro-batches)."""
    return replace(
        p,
        baseline=replace(p.baseline, extra=(*p.baseline.extra, *batch)),
        drafter=replace(p.drafter, extra=(*p.drafter.extra, *batch)),
    )


def plans(
    models: tinymodels.Qwen35Models,
    llama_server: Path,
    *,
    device: str = "cpu",
    tokens: int = defaults.TOKENS,
    near_tie: float = defaults.NEAR_TIE,
    build_key: str = "",
    llama_server_sha256: str | None = None,
    floors: Floors | None = None,
    dflash_floors: Floors = DFLASH_FLOORS,
    mtp_floors: Floors = MTP_FLOORS,
    llama: tinymodels.TinyModels | None = None,
    llama_spec_type: str | None = "draft-simple",
) -> tuple[EngineLeg, ...]:
    """The legs on the qwen35 target (pure but for the files' sha256): the near drafter with ``floors`` (pins.yaml
    equivalence.floors), the DFlash drafter with ``dflash_floors`` (twice: 16-token micro-batches and one), the MTP
    head with ``mtp_floors``; and, given ``llama``, the llama target's leg."""

    def leg(drafter: Path, spec_type: str | None, leg_floors: Floors | None, target: Path = models.target) -> EquivalencePlan:
        p = eq_plan.plan(
            model=target,
            drafter=drafter,
            llama_server=llama_server,
            spec_type=spec_type,
            tokens=tokens,
            near_tie=near_tie,
            device=device,
            build_key=build_key,
            llama_server_sha256=llama_server_sha256,
            models=TINY_MODELS,
            floors=leg_floors,
        )
        return replace(p, hang_after=defaults.TINY_HANG_AFTER)  # a drafter server that never answers: 2 minutes, not 10

    # spec_type None: the gate sees a dflash drafter and goes through the launcher's --dflash
    dflash = leg(models.dflash, None, dflash_floors)
    legs = [
        EngineLeg(NEAR, with_micro_batch(leg(models.near_drafter, "draft-simple", floors))),
        EngineLeg(DFLASH, with_micro_batch(dflash)),
        EngineLeg(DFLASH_WHOLE, with_micro_batch(dflash, ONE_MICRO_BATCH)),
        EngineLeg(MTP, with_micro_batch(leg(models.mtp, MTP_SPEC_TYPE, mtp_floors))),
    ]
    if llama is not None:  # last: the run's shared identity (model, its sha256) stays the qwen35 target's
        legs.append(EngineLeg(LLAMA, leg(llama.near_drafter, llama_spec_type, floors, target=llama.target)))
    return tuple(legs)


def combine(results: Sequence[tuple[str, GateResult]], seconds: float = 0.0, extra: Sequence[CaseResult] = ()) -> GateResult:
    """One equivalence verdict over the legs (pure): cases, metrics and properties prefixed with the leg's kind, the
    worst status, and the run's identity (tiny generated models) once; ``extra`` cases judged across the legs
    (:func:`context_cases`) join them, a failed one failing the gate and naming itself among the problems."""
    cases: list[CaseResult] = []
    problems: list[str] = []
    metrics: list[tuple[str, float]] = []
    properties: list[tuple[str, str]] = []
    for kind, r in results:
        cases += [replace(c, name=f"{kind}/{c.name}", classname=f"{GATE}.{kind}") for c in r.cases]
        problems += [f"{kind}: {p}" for p in r.problems]
        metrics += [(f"{kind}.{k}", x) for k, x in r.metrics]
        for k, v in r.properties:
            if k == "floors" and kind == NEAR:  # pins.yaml's floors, which the near leg runs on: what ship binds the record to
                properties.append((k, v))
            if k in (
                "models",
                "model",
                "model_sha256",
                "prompts_sha256",
                "llama_server",
                "llama_server_sha256",
                "device",
                "build_key",
                "tokens",
                "near_tie_nats",
                "seed",
            ):
                if k not in dict(properties):
                    properties.append((k, v))
            else:
                properties.append((f"{kind}.{k}", v))
    failed = [c for c in extra if c.status is Status.FAILED]
    cases += extra
    problems += [f"{c.name}: {c.message}" for c in failed]
    statuses = [r.status for _, r in results] + [c.status for c in failed]
    if not results or Status.ERROR in statuses:
        status = Status.ERROR
    elif all(s is Status.PASSED for s in statuses):
        status = Status.PASSED
    else:
        status = Status.FAILED
    properties.append(("drafter_kinds", ",".join(k for k, _ in results)))
    legs = "; ".join(LEG_SUMMARY.format(kind=kind, summary=r.summary.split(": ", 1)[-1]) for kind, r in results)
    summary = SUMMARY.format(status=status.value.upper(), legs=legs)
    if failed:
        summary += "; " + DRAFTED_DIFFERENTLY_COUNT.format(kind=CONTEXT, count=len(failed))
    return GateResult(
        gate=GATE,
        status=status,
        summary=summary,
        cases=tuple(cases),
        problems=tuple(problems),
        counts=case_counts(cases),
        properties=tuple(properties),
        metrics=tuple(metrics),
        seconds=seconds or sum(r.seconds for _, r in results),
    )


def context_cases(split: GateResult, whole: GateResult, device: str) -> tuple[CaseResult, ...]:
    """Per prompt, the DFlash drafter's drafts with 16-token micro-batches (``split``) against one micro-batch
    (``whole``); pure. Equal on the CPU; within :data:`GPU_ACCEPTANCE_SLACK` of acceptance on another device."""
    if not (split.status.ok and whole.status.ok):
        why = NOT_COMPARED.format(leg=DFLASH if not split.status.ok else DFLASH_WHOLE)
        return (CaseResult(CONTEXT, Status.SKIPPED, why, classname=f"{GATE}.{CONTEXT}"),)
    a, b = dict(split.metrics), dict(whole.metrics)
    cases = []
    for c in split.cases:
        n16, a16 = int(a.get(f"{c.name}.draft_n", 0)), int(a.get(f"{c.name}.draft_n_accepted", 0))
        n1, a1 = int(b.get(f"{c.name}.draft_n", 0)), int(b.get(f"{c.name}.draft_n_accepted", 0))
        drafts = DRAFTS.format(split_drafted=n16, split_accepted=a16, whole_drafted=n1, whole_accepted=a1)
        gap = abs(a16 / max(n16, 1) - a1 / max(n1, 1))
        if (n16, a16) == (n1, a1):
            status, text = Status.PASSED, drafts
        elif device != "cpu" and gap <= GPU_ACCEPTANCE_SLACK:
            status, text = Status.PASSED, f"{drafts}: within the {GPU_ACCEPTANCE_SLACK:g} of acceptance allowed off the CPU"
        else:
            status, text = Status.FAILED, DRAFTED_DIFFERENTLY.format(drafts=drafts)
        cases.append(CaseResult(f"{CONTEXT}/{c.name}", status, text, classname=f"{GATE}.{CONTEXT}"))
    return tuple(cases)


def sharing(legs: Sequence[EngineLeg]) -> list[list[EngineLeg]]:
    """The legs in groups that share a baseline server (:func:`equivalence.shares_baseline`), in order of first
    appearance (pure): the near, dflash and mtp legs run the same target on the same micro-batches."""
    groups: dict[tuple[object, ...], list[EngineLeg]] = {}
    for leg in legs:
        groups.setdefault(equivalence.baseline_launch(leg.plan), []).append(leg)
    return list(groups.values())


def run(legs: Sequence[EngineLeg], logs: Path) -> GateResult:
    """The legs group by group (:func:`sharing`: one baseline server a group, its log under the first leg's
    ``logs/KIND``, a drafter server a leg), then one verdict, with the two DFlash legs' drafts compared when both ran."""
    by_kind: dict[str, GateResult] = {}
    for group in sharing(legs):
        shared = equivalence.run_shared([leg.plan for leg in group], [logs / leg.kind for leg in group])
        by_kind.update((leg.kind, result) for leg, result in zip(group, shared, strict=True))
    results = [(leg.kind, by_kind[leg.kind]) for leg in legs]
    device = legs[0].plan.device if legs else "cpu"
    extra = context_cases(by_kind[DFLASH], by_kind[DFLASH_WHOLE], device) if DFLASH in by_kind and DFLASH_WHOLE in by_kind else ()
    return combine(results, extra=extra)


def gate(
    build_dir: Path,
    llama_server: Path,
    out: Path,
    *,
    device: str,
    tokens: int,
    near_tie: float,
    build_key: str,
    llama_server_sha256: str,
    floors: Floors,
    spec_type: str | None = "draft-simple",
) -> GateResult:
    """The registry's entry for the tiny generated models: write them under the build, run the qwen35 target's legs
    and the llama target's."""
    models = tinymodels.write_qwen35_models(build_dir / "tiny-models")
    llama = tinymodels.write_tiny_models(build_dir / "tiny-models")
    legs = plans(
        models,
        llama_server,
        device=device,
        tokens=tokens,
        near_tie=near_tie,
        build_key=build_key,
        llama_server_sha256=llama_server_sha256,
        floors=floors,
        llama=llama,
        llama_spec_type=spec_type,
    )
    return run(legs, out / "equivalence-logs")

