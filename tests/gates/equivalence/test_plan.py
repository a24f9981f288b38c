"""The plan (pure): the legs' launcher command lines, the request body, the prompts, the result's serialisation."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest

from ci.errors import ConfigError, ServerFailed
from ci.gates.equivalence import judge as ej
from ci.gates.equivalence import plan as eq_plan
from ci.gates.equivalence import run as eq
from ci.gates.results import Status, write_json, write_junit
from ci.gates.serving import model_sets
from ci.gates.serving import prompts as prompt_set
from ci.gates.serving.llama import LAUNCHER
from ci.gates.serving.prompts import Prompt
from ci.gates.tiny.models import TinyModels
from tests.support.equivalence import Recorded
from tests.support.messages import pattern


def dflash_drafter(path: Path) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "dflash")
    w.add_uint32("dflash.block_size", 8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_legs_go_through_the_launcher(tiny_models: TinyModels) -> None:
    plan = eq_plan.plan(model=tiny_models.target, drafter=tiny_models.drafter, llama_server=Path("bin/llama-server"), device="cpu")
    base = plan.launch(plan.baseline, 8001)
    assert base.argv == (
        sys.executable, *LAUNCHER, "-m", str(tiny_models.target), "--device", "cpu", "--llama-server", "bin/llama-server",
        "--host", "127.0.0.1", "--port", "8001", "-c", "2048",
    )  # fmt: skip
    drafted = plan.launch(plan.drafter, 8002)
    assert drafted.argv[drafted.argv.index("--") :] == (
        "--", "-md", str(tiny_models.drafter), "--spec-type", "draft-simple", "--spec-draft-n-max", "8", "--spec-draft-p-min", "0",
    )  # fmt: skip
    assert drafted.url == "http://127.0.0.1:8002"
    assert plan.spec_type == "draft-simple"
    assert not plan.overlap_start  # on the CPU the two servers start one after the other


def test_off_the_cpu_both_servers_start_at_once(tiny_models: TinyModels) -> None:
    plan = eq_plan.plan(model=tiny_models.target, drafter=tiny_models.drafter, llama_server=Path("llama-server"), device="rocm")
    assert plan.overlap_start
    assert plan.launch(plan.baseline, 1).argv[plan.launch(plan.baseline, 1).argv.index("--device") + 1] == "rocm"


def test_a_dflash_drafter_uses_serves_dflash_route(tiny_models: TinyModels, tmp_path: Path) -> None:
    d = dflash_drafter(tmp_path / "d.gguf")
    assert model_sets.gguf_architecture(d) == "dflash"
    plan = eq_plan.plan(model=tiny_models.target, drafter=d, llama_server=Path("llama-server"), device="rocm")
    argv = plan.launch(plan.drafter, 9)
    assert argv.argv[-2:] == ("--dflash", str(d))
    assert "--" not in argv.argv
    assert plan.spec_type == "draft-dflash"
    # an explicit --spec-type serves any drafter through -md (the never-drafting negative run uses "none")
    plan = eq_plan.plan(model=tiny_models.target, drafter=d, llama_server=Path("llama-server"), spec_type="none")
    assert plan.drafter.extra[:4] == ("-md", str(d), "--spec-type", "none")


def test_request_body_is_greedy_and_resumes_with_token_ids() -> None:
    plan = eq_plan.EquivalencePlan(eq_plan.Leg("baseline", Path("m")), eq_plan.Leg("drafter", Path("m")), (), Path("s"), seed=7)
    p = Prompt("short", "Q: A?\nA:")
    assert plan.body(p, ej.Resume((), 256)) == {
        "prompt": "Q: A?\nA:", "n_predict": 256, "ignore_eos": True, "temperature": 0, "top_k": 1, "seed": 7, "cache_prompt": False, "n_probs": 2,
        "return_tokens": True,
    }  # fmt: skip
    body = plan.body(p, ej.Resume((5, 6, 7), 253))
    assert body["prompt"] == ["Q: A?\nA:", 5, 6, 7]
    assert body["n_predict"] == 253


def test_committed_prompts_and_a_replacement_directory(tmp_path: Path) -> None:
    assert [p.name for p in prompt_set.load_prompts()] == ["code", "prose", "short"]
    (tmp_path / "one.txt").write_text("Once")
    (tmp_path / "notes.md").write_text("not a prompt")
    assert prompt_set.load_prompts(tmp_path) == (Prompt("one", "Once"),)
    (tmp_path / "two.txt").write_text("  \n")
    with pytest.raises(ConfigError, match=re.escape(prompt_set.EMPTY_PROMPT.format(where=tmp_path, name="two"))):
        prompt_set.load_prompts(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=re.escape(prompt_set.NO_PROMPTS.format(where=empty))):
        prompt_set.load_prompts(empty)
    (empty / "bytes.txt").write_bytes(b"\xb7 not text")  # before: "internal error: UnicodeDecodeError" (a hostile pass)
    with pytest.raises(ConfigError, match=re.escape(prompt_set.PROMPT_NOT_UTF8.format(path=empty / "bytes.txt", byte=0xB7))):
        prompt_set.load_prompts(empty)


def test_plan_refuses_bad_options(tiny_models: TinyModels, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(model_sets.NO_SUCH_MODEL.format(option="--drafter", path=tmp_path / "missing.gguf"))):
        eq_plan.plan(model=tiny_models.target, drafter=tmp_path / "missing.gguf", llama_server=Path("s"))
    with pytest.raises(ConfigError, match=re.escape(eq_plan.TOO_FEW_TOKENS.format(tokens=0))):
        eq_plan.plan(model=tiny_models.target, drafter=tiny_models.drafter, llama_server=Path("s"), tokens=0)
    for near_tie in (-1.0, math.nan, math.inf):  # nan and inf were taken: inf calls every divergence a near-tie
        with pytest.raises(ConfigError, match=re.escape(eq_plan.BAD_NEAR_TIE.format(near_tie=near_tie))):
            eq_plan.plan(model=tiny_models.target, drafter=tiny_models.drafter, llama_server=Path("s"), near_tie=near_tie)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(ConfigError, match=pattern(model_sets.NOT_GGUF, path=junk)):
        model_sets.gguf_architecture(junk)


def _plan(recorded: Recorded) -> eq_plan.EquivalencePlan:
    return eq_plan.EquivalencePlan(eq_plan.Leg("baseline", Path("t.gguf")), eq_plan.Leg("drafter", Path("t.gguf")), (recorded.prompt, Prompt("later", "x")), Path("llama-server"), tokens=64)


def test_gate_result_records_the_verdicts_and_serialises(recorded: Recorded, tmp_path: Path) -> None:
    plan = _plan(recorded)
    seg = ej.Segment(0, recorded.answer("baseline@0"), recorded.answer("drafter@0"))
    v = ej.judge(recorded.prompt, [seg], 64, plan.near_tie)
    assert isinstance(v, ej.PromptVerdict)
    other = ej.judge(Prompt("later", "x"), [ej.Segment(0, recorded.answer("baseline@0"), recorded.answer("other_target@0"))], 64, plan.near_tie)
    assert isinstance(other, ej.PromptVerdict)
    result = eq.gate_result(plan, [v, other])
    assert result.status is Status.FAILED
    assert result.problems == (eq.PROBLEM.format(prompt="later", message=other.message),)
    m = dict(result.metrics)
    d = recorded.raw("drafter@0")["timings"]
    assert m["short.acceptance"] == round(d["draft_n_accepted"] / d["draft_n"], 4)
    assert m["later.divergence_position"] == 0
    assert m["later.divergence_margin"] > 0.1
    assert dict(result.properties)["near_tie_nats"] == "0.1"
    write_json(tmp_path / "equivalence.json", result)
    write_junit(tmp_path / "equivalence.junit.xml", [result])
    assert json.loads((tmp_path / "equivalence.json").read_text())["cases"][1]["status"] == "failed"
    junit = (tmp_path / "equivalence.junit.xml").read_text()
    assert '<property name="metric.short.tokens_per_step"' in junit
    assert "<failure" in junit


def test_the_summary_says_what_held_before_what_fell_short(recorded: Recorded, tmp_path: Path) -> None:
    """A far drafter: every prompt's output identical, only the evidence floors failed. The summary had said
    "0/3 prompts equal" (issue 37); it says the prompts were identical, then that the evidence fell short, and so do
    the JUnit file's messages and the job summary's row."""
    from ci.release.records import summary_markdown

    plan = _plan(recorded)
    far = [
        verdict_of(ej.judge(Prompt(name, recorded.prompt.text), [ej.Segment(0, recorded.answer("baseline@0"), recorded.answer("never_accepted@0"))], 64, plan.near_tie))
        for name in ("short", "later")
    ]
    result = eq.gate_result(plan, far)
    assert result.status is Status.FAILED
    head = pattern(eq.SUMMARY + eq.SUMMARY_ACCEPTANCE, status="FAILED", identical=2, prompts=2, tokens=64, near_ties=0, accepted=0)
    assert head.match(result.summary), result.summary
    assert result.summary.endswith(eq.SUMMARY_BELOW_FLOORS.format(count=2))
    assert eq.SUMMARY_NEVER_DRAFTED.format(count=2) not in result.summary
    write_junit(tmp_path / "equivalence.junit.xml", [result])
    junit = (tmp_path / "equivalence.junit.xml").read_text()
    assert junit.count(ej.IDENTICAL.format(tokens=64)) == 2  # each prompt's failure message says its output held
    assert eq.SUMMARY_BELOW_FLOORS.format(count=2) in summary_markdown([result], "t")

    never = [
        verdict_of(ej.judge(Prompt(name, recorded.prompt.text), [ej.Segment(0, recorded.answer("baseline@0"), recorded.answer("never_drafts@0"))], 64, plan.near_tie))
        for name in ("short", "later")
    ]
    result = eq.gate_result(plan, never)
    expected = eq.SUMMARY.format(status="FAILED", identical=2, prompts=2, tokens=64, near_ties=0, near_tie=plan.near_tie)
    assert result.summary == expected + eq.SUMMARY_NEVER_DRAFTED.format(count=2)

    # one prompt diverged far from a near-tie, the other held: 1/2 identical, and the diverged one is not counted
    seg = ej.Segment(0, recorded.answer("baseline@0"), recorded.answer("drafter@0"))
    held = verdict_of(ej.judge(recorded.prompt, [seg], 64, plan.near_tie))
    diverged = verdict_of(ej.judge(Prompt("later", "x"), [ej.Segment(0, recorded.answer("baseline@0"), recorded.answer("other_target@0"))], 64, plan.near_tie))
    result = eq.gate_result(plan, [held, diverged])
    assert pattern(eq.SUMMARY, status="FAILED", identical=1, prompts=2).match(result.summary)


def verdict_of(step: ej.Resume | ej.PromptVerdict) -> ej.PromptVerdict:
    assert isinstance(step, ej.PromptVerdict), step
    return step


def test_a_server_failure_is_an_error_with_the_log_tail(recorded: Recorded) -> None:
    plan = _plan(recorded)
    failure = ServerFailed("drafter server died during POST /completion: SIGKILL (killed by signal 9)", "line 1\nlast words\n")
    result = eq.gate_result(plan, [], failure)
    assert result.status is Status.ERROR
    assert [(c.name, c.status) for c in result.cases] == [("short", Status.ERROR), ("later", Status.SKIPPED)]
    assert result.cases[0].detail == "line 1\nlast words\n"
    assert result.problems == (eq.WITH_LOG_TAIL.format(problem=failure.message, log_tail="line 1\nlast words"),)
    assert result.summary == eq.SUMMARY.format(status="ERROR", identical=0, prompts=2, tokens=64, near_ties=0, near_tie=plan.near_tie) + "; " + failure.message


@pytest.mark.slow
def test_auto_asks_the_real_cpu_llama_server_and_picks_cpu() -> None:
    from ci.gates.serving import devices
    from tests.support.binaries import llama_binary

    assert devices.auto(llama_binary("llama-server")) == "cpu"


@pytest.mark.parametrize(
    ("listing", "device"),
    [
        ("  CUDA0: NVIDIA H200 (143156 MiB, 142000 MiB free)\n  Vulkan0: NVIDIA H200 (143156 MiB, 142000 MiB free)\n", "vulkan"),
        ("  ROCm0: Radeon 8060S Graphics (98304 MiB, 97000 MiB free)\n  Vulkan0: Radeon 8060S Graphics (RADV GFX1151)\n", "rocm"),
        ("  CUDA0: NVIDIA H200 (143156 MiB, 142000 MiB free)\n", "cuda"),
        ("  (none)\n", "cpu"),
    ],
)
def test_auto_picks_in_the_routes_order_from_a_stand_in_listing(tmp_path: Path, listing: str, device: str) -> None:
    """A stand-in llama-server that prints a GPU box's --list-devices (no GPU here); asked once, then cached."""
    from ci.gates.serving import devices

    calls = tmp_path / "calls"
    server = tmp_path / "llama-server"
    server.write_text(f"#!/bin/sh\necho x >> {calls}\nprintf 'Available devices:\\n{listing.replace(chr(10), chr(92) + 'n')}'\n")
    server.chmod(0o755)
    assert devices.auto(server) == device
    assert devices.auto(server) == device
    assert calls.read_text().count("x") == 1
