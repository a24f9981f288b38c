"""The bench command's recipe half: the recipe and its claim settled before any server starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.commands import bench as bench_command
from ci.errors import ConfigError


def test_a_recipe_to_re_measure_and_its_claim_are_settled_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        bench_command.recipe_target("dflash-p-min-0", None, check=True)
    assert exc.value.message == 'recipe "dflash-p-min-0" has no "check" to re-judge; add one (docs/recipes.md) or drop --check'
    with pytest.raises(ConfigError) as exc:
        bench_command.recipe_target("dflash-p-min", None, check=False)
    assert exc.value.message.startswith('--recipe dflash-p-min: no such recipe (did you mean "dflash-p-min-0"?)')
    # a recipes file whose path has a space still reaches both configs whole
    (without, with_) = bench_command.recipe_configs("x", "--device cpu", tmp_path / "my recipes.json")
    assert without.serve_options == ("--recipes", str(tmp_path / "my recipes.json"), "--skip-recipe", "x", "--device", "cpu")
    assert with_.serve_options == ("--recipes", str(tmp_path / "my recipes.json"), "--device", "cpu")
