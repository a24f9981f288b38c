"""The bench command: the recipe and its claim settled before any server starts, the measured line said only where
something changed and naming its protocol, the protocol chosen, and the box lock held by default (the perf gate's)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ci import parser, schema
from ci.cli import COMMANDS
from ci.commands import bench as bench_command
from ci.errors import ConfigError
from ci.files import cache_dir
from ci.gates.serving import bench, protocol
from tests.support.messages import pattern, said


def bench_args(*extra: str) -> argparse.Namespace:
    return parser.parser({name: lambda args: 0 for name in COMMANDS}).parse_args(["bench", "-m", "M.gguf", "--config", "base=", *extra])


def test_the_bench_asks_by_the_seeds_protocol_unless_told_completion() -> None:
    assert tuple(protocol.PROTOCOLS) == parser.BENCH_PROTOCOLS
    assert bench_args().protocol == protocol.SEEDS
    assert bench_args("--protocol", "completion").protocol == protocol.COMPLETION
    assert bench_args().prompt_tokens is None  # the protocol's own: 1,838 for the seeds', 1,800 for completion


def test_the_bench_holds_the_perf_gates_box_lock_unless_told_otherwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bench and the perf gate on one box never measure at once: both hold $ONEBIT_BOX_LOCK, else the cache's box.lock."""
    monkeypatch.delenv(bench.BOX_LOCK_VAR, raising=False)
    assert bench_command.lock_of(bench_args()) == cache_dir() / "box.lock"
    monkeypatch.setenv(bench.BOX_LOCK_VAR, str(tmp_path / "shared.lock"))
    assert bench_command.lock_of(bench_args()) == tmp_path / "shared.lock"
    assert bench_command.lock_of(bench_args("--lock", "own.lock")) == Path("own.lock")
    assert bench_command.lock_of(bench_args("--no-lock")) is None


def test_a_lock_and_no_lock_at_once_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_args("--lock", "own.lock", "--no-lock")
    assert exc.value.code == 2
    assert "--no-lock: not allowed with argument --lock" in capsys.readouterr().err


def test_a_recipe_to_re_measure_and_its_claim_are_settled_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        bench_command.recipe_target("dflash-p-min-0", None, check=True)
    assert exc.value.message == bench_command.NO_CHECK.format(recipe="dflash-p-min-0")
    with pytest.raises(ConfigError) as exc:
        bench_command.recipe_target("dflash-p-min", None, check=False)
    suggestion = schema.DID_YOU_MEAN.format(choice="dflash-p-min-0")
    assert pattern(bench_command.NO_RECIPE, recipe="dflash-p-min", suggestion=suggestion).match(exc.value.message)
    # a recipes file whose path has a space still reaches both configs whole
    (without, with_) = bench_command.recipe_configs("x", "--device cpu", tmp_path / "my recipes.json")
    assert without.serve_options == ("--recipes", str(tmp_path / "my recipes.json"), "--skip-recipe", "x", "--device", "cpu")
    assert with_.serve_options == ("--recipes", str(tmp_path / "my recipes.json"), "--device", "cpu")


def figure(config: str, metric: str, samples: list[float]) -> bench.Figure:
    s = bench.spread(samples)
    return bench.Figure(config, metric, s.best, s.median, len(samples), None, spread=s)


def test_the_measured_line_says_no_change_where_the_intervals_overlap_and_is_not_printed_when_nothing_changed() -> None:
    """A recipe that changed nothing had printed a paste-ready "+0.4%" (issue 37, item 5)."""
    same_without = figure("without", "decode", [30.0, 30.4, 29.8, 30.2, 30.1])
    same_with = figure("with", "decode", [30.1, 30.3, 29.9, 30.2, 30.0])
    assert bench_command.overlaps(same_without, same_with)
    faster = figure("with", "prompt", [120.0, 121.0, 119.5, 120.5, 120.2])
    slower = figure("without", "prompt", [100.0, 101.0, 99.5, 100.5, 100.2])
    assert not bench_command.overlaps(slower, faster)
    line = bench_command.measured_line("r", ("prompt", "decode"), [slower, same_without, faster, same_with], 5, "nox -s bench -- --recipe r", "2026-12-06", "h", "seeds")
    change = 100 * (faster.median / slower.median - 1)
    parts = "; ".join((
        bench_command.METRIC_CHANGE.format(metric="prompt", before=slower.median, after=faster.median, change=change),
        bench_command.METRIC_NO_CHANGE.format(metric="decode", before=same_without.median, after=same_with.median),
    ))  # fmt: skip
    assert said(bench_command.MEASURED, line, parts=parts, rounds=bench_command.ROUNDS.format(rounds=5, protocol="seeds"), date="2026-12-06", host="h")
    # nothing changed: no measured: line at all, and the line says so
    alone = bench_command.measured_line("r", ("decode",), [same_without, same_with], 5, "c", "d", "h", "seeds")
    no_change = bench_command.METRIC_NO_CHANGE.format(metric="decode", before=same_without.median, after=same_with.median)
    assert alone == bench_command.NO_CHANGE.format(recipe="r", parts=no_change, rounds=bench_command.ROUNDS.format(rounds=5, protocol="seeds"))
    assert "measured:" not in alone.replace("no measured: line", "")
