"""The bench command's recipe half: the recipe and its claim settled before any server starts, and the measured line
said only where something changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci import schema
from ci.commands import bench as bench_command
from ci.errors import ConfigError
from ci.gates.serving import bench
from tests.support.messages import pattern, said


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
    line = bench_command.measured_line("r", ("prompt", "decode"), [slower, same_without, faster, same_with], 5, "nox -s bench -- --recipe r", "2026-12-06", "h")
    change = 100 * (faster.median / slower.median - 1)
    parts = "; ".join((
        bench_command.METRIC_CHANGE.format(metric="prompt", before=slower.median, after=faster.median, change=change),
        bench_command.METRIC_NO_CHANGE.format(metric="decode", before=same_without.median, after=same_with.median),
    ))  # fmt: skip
    assert said(bench_command.MEASURED, line, parts=parts, rounds=bench_command.ROUNDS.format(rounds=5), date="2026-12-06", host="h")
    # nothing changed: no measured: line at all, and the line says so
    alone = bench_command.measured_line("r", ("decode",), [same_without, same_with], 5, "c", "d", "h")
    no_change = bench_command.METRIC_NO_CHANGE.format(metric="decode", before=same_without.median, after=same_with.median)
    assert alone == bench_command.NO_CHANGE.format(recipe="r", parts=no_change, rounds=bench_command.ROUNDS.format(rounds=5))
    assert "measured:" not in alone.replace("no measured: line", "")
