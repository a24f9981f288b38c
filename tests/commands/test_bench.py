"""The bench command's recipe half: the recipe and its claim settled before any server starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci import schema
from ci.commands import bench as bench_command
from ci.errors import ConfigError
from tests.support.messages import pattern


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
