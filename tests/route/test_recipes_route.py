"""recipes_route: tuned settings as data (the engine's recipes_route checks, and every malformed file)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from serve import bounded, cli, recipes, route
from serve.errors import A_RECIPES_FILE, AT, DID_YOU_MEAN, NO_SUCH_FILE, NOT_A_FILE
from serve.recipes import RECIPE, UNKNOWN
from tests.support.route import DryRun

ROCM = ["--device", "ROCm0", "-ngl", "99", "--jinja", "--host", "127.0.0.1", "--port", "8080"]

DryRunFn = Callable[..., DryRun]
ErrorFn = Callable[..., tuple[int, str]]
FileFn = Callable[[str], str]


def at(*parts: str) -> str:
    """A problem after the places it is in, the way serve names them (serve.errors.AT): ``at("x.json", MINE, "args", problem)``."""
    return functools.reduce(lambda where, problem: AT.format(where=where, problem=problem), parts)


def did_you_mean(choice: str) -> str:
    return DID_YOU_MEAN.format(choice=choice)


MINE = RECIPE.format(id="mine")


def write_recipes(path: Path, doc: object) -> str:
    path.write_text(json.dumps(doc, indent=2))
    return path.name


def a_recipe(**fields: Any) -> dict[str, Any]:
    recipe: dict[str, Any] = {
        "id": "mine",
        "match": {"architecture": ["qwen3moe"]},
        "args": ["-b", "4096"],
        "env": {"ONEBIT_TEST_KNOB": "1"},
        "why": "a test",
        "measured": "pp512 100 -> 110 t/s (measured by this test's author)",
        "source": "tests/serve",
    }
    recipe.update(fields)
    return {k: v for k, v in recipe.items() if v is not None}


# -- the built-in recipes ------------------------------------------------------------------------------------


def test_moe_gets_ub_1024_and_the_recipe_line(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-moe"))
    assert r.argv == ["llama-server", "-m", "rotated-moe.gguf", *ROCM, "-ub", "1024"]
    assert r.recipe_lines() == [cli.RECIPE_APPLIED.format(id="rotated-moe-ub1024", added="-ub 1024")]
    assert r.recipes == ["rotated-moe-ub1024"]


def test_dense_gets_no_ub_and_no_recipe_line(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"))
    assert r.argv == ["llama-server", "-m", "rotated-dense.gguf", *ROCM]
    assert r.recipe_lines() == []


def test_unrotated_moe_on_rocm_gets_no_ub(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain-moe"), "--device", "rocm")
    assert "-ub" not in r.argv
    assert r.recipes == []


def test_moe_with_no_recipes_adds_nothing(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-moe"), "--no-recipes")
    assert r.argv == ["llama-server", "-m", "rotated-moe.gguf", *ROCM]
    assert r.env == {"GGML_W4A4_TENSORS": "all"}, "the Hadamard environment follows from the file, not a recipe"
    assert r.recipes == []
    assert r.recipe_lines() == []
    assert route.RECIPES_OFF in r.notes


def test_dflash_gets_p_min_0_exactly_once(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--dflash", gguf_file("dflash-b8"))
    assert r.argv.count("--spec-draft-p-min") == 1
    assert r.argv[r.argv.index("--spec-draft-p-min") + 1] == "0"
    assert r.recipe_lines() == [cli.RECIPE_APPLIED.format(id="dflash-p-min-0", added="--spec-draft-p-min 0")]


def test_user_mtp_p_min_beats_the_recipe(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"), "--dflash", gguf_file("dflash"), "--mtp-p-min", "0.5")
    assert r.argv.count("--spec-draft-p-min") == 1
    assert r.argv[r.argv.index("--spec-draft-p-min") + 1] == "0.5"
    assert r.recipes == []
    assert r.recipe_lines() == []


@pytest.mark.parametrize("given", [["-ub", "512"], ["--ubatch-size", "512"], ["--ubatch-size=512"]])
def test_user_ub_after_double_dash_is_kept_and_the_recipe_adds_nothing(given: list[str], gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-moe"), "--", *given)
    assert r.argv == ["llama-server", "-m", "rotated-moe.gguf", *ROCM, *given]
    assert r.recipes == []
    assert r.recipe_lines() == []
    assert recipes.ALREADY_GIVEN.format(id="rotated-moe-ub1024", given="-ub", rest=recipes.ADDS_NO_MORE) in r.notes


def test_user_draft_p_min_alias_after_double_dash_beats_the_recipe(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--dflash", gguf_file("dflash"), "--", "--draft-p-min", "0.2")
    assert r.argv[-2:] == ["--draft-p-min", "0.2"]
    assert "--spec-draft-p-min" not in r.argv
    assert r.recipes == []


def test_builtin_recipes_carry_their_measurements() -> None:
    builtin = recipes.builtin()
    assert builtin.ids == ("rotated-moe-ub1024", "dflash-p-min-0", "long-model-ub1024")
    ub, pmin, long = builtin.recipes
    assert long.match == recipes.Match(long_model=True)
    assert long.args == ("-ub", "1024")
    assert "12.96 s through 1bit serve --long-model instead of 13.89 s" in long.measured
    assert long.source == "engine #205"
    assert ub.args == ("-ub", "1024")
    assert ub.match == recipes.Match(device=("rocm",), hadamard_q4_0=True, moe=True)
    assert "2,001 -> 2,158 t/s" in ub.measured
    assert "491-495 t/s at 512 and 471-473 at 1024" in ub.measured
    assert ub.source == "engine #205, #229"
    assert pmin.args == ("--spec-draft-p-min", "0")
    assert pmin.match == recipes.Match(drafter=("dflash",))
    assert "0.75 cut DFlash2 blocks from 6.7 to 5.4 tokens per step" in pmin.measured
    assert pmin.source == "engine #194"


# -- --recipes FILE ------------------------------------------------------------------------------------------


def test_recipes_file_replaces_the_builtins(tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn) -> None:
    mine = write_recipes(tmp_path / "mine.json", {"recipes": [a_recipe()]})
    r = dry_run("-m", gguf_file("rotated-moe"), "--dflash", gguf_file("dflash"), "--recipes", mine)
    assert r.argv[-2:] == ["-b", "4096"]
    assert "-ub" not in r.argv, "rotated-moe-ub1024 is gone"
    assert "--spec-draft-p-min" not in r.argv, "dflash-p-min-0 is gone"
    assert r.env == {"GGML_W4A4_TENSORS": "all", "ONEBIT_TEST_KNOB": "1"}
    assert r.recipes == ["mine"]
    assert r.recipe_lines() == [cli.RECIPE_APPLIED.format(id="mine", added="-b 4096 ONEBIT_TEST_KNOB=1")]


def test_recipe_env_never_overrides_the_environment(
    tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONEBIT_TEST_KNOB", "0")
    mine = write_recipes(tmp_path / "mine.json", {"recipes": [a_recipe()]})
    r = dry_run("-m", gguf_file("plain-moe"), "--recipes", mine)
    assert r.env == {}
    assert r.argv[-2:] == ["-b", "4096"]
    assert r.recipe_lines() == [cli.RECIPE_APPLIED.format(id="mine", added="-b 4096")]
    assert recipes.ALREADY_GIVEN.format(id="mine", given="ONEBIT_TEST_KNOB", rest=recipes.ADDS_THE_REST) in r.notes


def test_recipe_env_never_overrides_serve_own_w4a4(tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn) -> None:
    mine = write_recipes(tmp_path / "mine.json", {"recipes": [a_recipe(args=None, env={"GGML_W4A4_TENSORS": "ffn_up"})]})
    r = dry_run("-m", gguf_file("rotated-moe"), "--recipes", mine)
    assert r.env == {"GGML_W4A4_TENSORS": "all"}
    assert r.recipes == []


def test_first_recipe_to_add_a_flag_wins(tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn) -> None:
    doc = {
        "recipes": [
            a_recipe(id="first", args=["--batch-size", "2048"], env=None),
            a_recipe(id="second", args=["-b", "4096", "-t", "8"], env=None),
        ]
    }
    r = dry_run("-m", gguf_file("plain-moe"), "--recipes", write_recipes(tmp_path / "two.json", doc))
    assert r.argv[-4:] == ["--batch-size", "2048", "-t", "8"]
    assert r.recipes == ["first", "second"]
    assert r.recipe_lines() == [
        cli.RECIPE_APPLIED.format(id="first", added="--batch-size 2048"),
        cli.RECIPE_APPLIED.format(id="second", added="-t 8"),
    ]


@pytest.mark.parametrize(
    ("match", "kind", "applies"),
    [
        ({"architecture": ["qwen35", "llama"]}, "plain", True),
        ({"architecture": ["llama"]}, "plain", False),
        ({"moe": False}, "plain", True),
        ({"moe": False}, "plain-moe", False),
        ({"drafter": ["none"]}, "plain", True),
        ({"device": ["vulkan"], "hadamard_q4_0": False}, "plain", True),
        ({"device": ["cuda"]}, "plain", False),
        ({}, "plain", True),
    ],
)
def test_match_keys(match: dict[str, Any], kind: str, applies: bool, tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn) -> None:
    mine = write_recipes(tmp_path / "m.json", {"recipes": [a_recipe(match=match, env=None)]})
    r = dry_run("-m", gguf_file(kind), "--recipes", mine)
    assert r.recipes == (["mine"] if applies else [])
    assert ("-b" in r.argv) is applies


def test_long_model_adds_1024_token_micro_batches_and_says_so(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--device", "cuda", "--long-model")
    assert r.argv[-2:] == ["-ub", "1024"]
    assert r.recipe_lines() == [cli.RECIPE_APPLIED.format(id="long-model-ub1024", added="-ub 1024")]
    assert "-ub" not in dry_run("-m", gguf_file("plain"), "--device", "cuda").argv


@pytest.mark.parametrize(("given", "applies"), [((), False), (("--long-model",), True)])
def test_a_long_model_recipe_applies_only_to_a_long_model_launch(given: tuple[str, ...], applies: bool, tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn) -> None:
    mine = write_recipes(tmp_path / "m.json", {"recipes": [a_recipe(match={"long_model": True}, args=["-ub", "1024"], env=None)]})
    r = dry_run("-m", gguf_file("plain"), "--recipes", mine, *given)
    assert r.recipes == (["mine"] if applies else [])
    assert (r.argv[-2:] == ["-ub", "1024"]) is applies


def test_long_model_with_the_micro_batch_given_keeps_the_users(tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn) -> None:
    mine = write_recipes(tmp_path / "m.json", {"recipes": [a_recipe(match={"long_model": True}, args=["-ub", "1024"], env=None)]})
    r = dry_run("-m", gguf_file("plain"), "--recipes", mine, "--long-model", "--", "-ub", "256")
    assert r.argv[-2:] == ["-ub", "256"]
    assert r.argv.count("-ub") == 1
    assert recipes.ALREADY_GIVEN.format(id="mine", given="-ub", rest=recipes.ADDS_NO_MORE) in r.notes


def test_recipes_and_no_recipes_together_are_refused(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    mine = write_recipes(tmp_path / "mine.json", {"recipes": [a_recipe()]})
    assert serve_error("-m", gguf_file("plain"), "--recipes", mine, "--no-recipes") == (2, cli.RECIPES_AND_NO_RECIPES)


# -- malformed files: each stops serve with one line naming the file and the problem --------------------------

MALFORMED: list[tuple[str, object, str]] = [
    ("unknown-key", {"recipes": [a_recipe(mesured="x")]},
     at(MINE, UNKNOWN.format(what="key", name="mesured", suggestion=did_you_mean("measured"),
                             known="id, match, args, env, why, measured, source, check"))),
    ("unknown-top-key", {"recipes": [], "recipe": []},
     UNKNOWN.format(what="key", name="recipe", suggestion=did_you_mean("recipes"), known="about, recipes")),
    ("unknown-match-key", {"recipes": [a_recipe(match={"archtecture": ["qwen3moe"]})]},
     at(MINE, UNKNOWN.format(what="match key", name="archtecture", suggestion=did_you_mean("architecture"),
                             known="device, architecture, drafter, moe, hadamard_q4_0, long_model"))),
    ("unknown-device", {"recipes": [a_recipe(match={"device": ["rcom"]})]},
     at(MINE, "match.device",
        UNKNOWN.format(what="device", name="rcom", suggestion=did_you_mean("rocm"), known="rocm, vulkan, cuda, cpu"))),
    ("unknown-drafter", {"recipes": [a_recipe(match={"drafter": ["dflsh"]})]},
     at(MINE, "match.drafter",
        UNKNOWN.format(what="drafter", name="dflsh", suggestion=did_you_mean("dflash"), known="dflash, mtp, none"))),
    ("id-twice", {"recipes": [a_recipe(), a_recipe(args=["-t", "4"])]},
     recipes.ID_TWICE.format(id="mine", first=0, second=1)),
    ("adds-nothing", {"recipes": [a_recipe(args=None, env=None)]},
     at(MINE, recipes.ADDS_NOTHING)),
    ("adds-nothing-empty", {"recipes": [a_recipe(args=[], env={})]},
     at(MINE, recipes.ADDS_NOTHING)),
    ("args-no-flag", {"recipes": [a_recipe(args=["1024", "-ub"])]},
     at(MINE, recipes.ARGS_NOT_A_FLAG.format(value='"1024"'))),
    ("args-negative-number", {"recipes": [a_recipe(args=["-1"])]},
     at(MINE, recipes.ARGS_NOT_A_FLAG.format(value='"-1"'))),
    ("no-measured", {"recipes": [a_recipe(measured=None)]},
     at(MINE, recipes.NO_MEASURED)),
    ("empty-measured", {"recipes": [a_recipe(measured="")]},
     at(MINE, recipes.EMPTY_MEASURED)),
    ("blank-measured", {"recipes": [a_recipe(measured="  \t ")]},
     at(MINE, recipes.EMPTY_MEASURED)),
    ("measured-not-string", {"recipes": [a_recipe(measured=2158)]},
     at(MINE, "measured", recipes.NOT_A_STRING.format(value=2158))),
    ("recipes-not-list", {"recipes": {"id": "mine"}},
     at("recipes", recipes.NOT_A_LIST.format(value="an object"))),
    ("args-not-list", {"recipes": [a_recipe(args="-ub 1024")]},
     at(MINE, "args", recipes.NOT_A_LIST.format(value='"-ub 1024"'))),
    ("match-list-not-list", {"recipes": [a_recipe(match={"device": "rocm"})]},
     at(MINE, "match.device", recipes.NOT_A_LIST.format(value='"rocm"'))),
    ("args-non-string", {"recipes": [a_recipe(args=["-ub", 1024])]},
     at(MINE, "args[1]", recipes.ENTRY_NOT_A_STRING.format(value=1024))),
    ("match-non-string", {"recipes": [a_recipe(match={"architecture": [7]})]},
     at(MINE, "match.architecture[0]", recipes.ENTRY_NOT_A_STRING.format(value=7))),
    ("env-value-non-string", {"recipes": [a_recipe(env={"GGML_W4A4_TENSORS": 1})]},
     at(MINE, "env.GGML_W4A4_TENSORS", recipes.NOT_A_STRING.format(value=1))),
    ("why-non-string", {"recipes": [a_recipe(why=["a", "b"])]},
     at(MINE, "why", recipes.NOT_A_STRING.format(value="a list"))),
    ("env-not-object", {"recipes": [a_recipe(env=["GGML_W4A4_TENSORS=all"])]},
     at(MINE, recipes.ENV_NOT_AN_OBJECT.format(value="a list"))),
    ("env-bad-name", {"recipes": [a_recipe(env={"GGML W4A4": "all"})]},
     at(MINE, "env", recipes.NOT_A_VARIABLE_NAME.format(value='"GGML W4A4"'))),
    ("moe-not-boolean", {"recipes": [a_recipe(match={"moe": "true"})]},
     at(MINE, "match.moe", recipes.NOT_A_BOOLEAN.format(value='"true"'))),
    ("hadamard-not-boolean", {"recipes": [a_recipe(match={"hadamard_q4_0": 32})]},
     at(MINE, "match.hadamard_q4_0", recipes.NOT_A_BOOLEAN.format(value=32))),
    ("match-not-object", {"recipes": [a_recipe(match=["rocm"])]},
     at(MINE, "match", recipes.NOT_AN_OBJECT.format(value="a list"))),
    ("empty-match-list", {"recipes": [a_recipe(match={"device": []})]},
     at(MINE, "match.device", recipes.EMPTY_MATCH_LIST)),
    ("no-id", {"recipes": [a_recipe(id=None)]},
     at("recipes[0]", recipes.NO_ID)),
    ("blank-id", {"recipes": [a_recipe(id=" ")]},
     at("recipes[0].id", recipes.IS_EMPTY)),
    ("id-with-space", {"recipes": [a_recipe(id="my recipe")]},
     at("recipes[0].id", recipes.BAD_ID.format(value='"my recipe"'))),
    ("recipe-not-object", {"recipes": ["rotated-moe-ub1024"]},
     at("recipes[0]", recipes.NOT_AN_OBJECT.format(value='"rotated-moe-ub1024"'))),
    ("no-recipes-key", {"about": "nothing"},
     recipes.NO_RECIPES_LIST),
    ("top-not-object", [a_recipe()],
     recipes.NOT_A_RECIPES_OBJECT.format(value="a list")),
    ("about-non-string", {"about": 1, "recipes": []},
     at("about", recipes.NOT_A_STRING.format(value=1))),
]  # fmt: skip


@pytest.mark.parametrize(("name", "doc", "problem"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_recipes_file_stops_serve(
    name: str, doc: object, problem: str, tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn
) -> None:
    path = write_recipes(tmp_path / f"{name}.json", doc)
    assert serve_error("-m", gguf_file("plain"), "--recipes", path) == (2, at(f"{name}.json", problem))


def test_recipes_file_that_is_not_json(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    (tmp_path / "broken.json").write_text('{"recipes": [}\n')
    assert serve_error("-m", gguf_file("plain"), "--recipes", "broken.json") == (
        2,
        at("broken.json", recipes.NOT_JSON.format(error="Expecting value", line=1, column=14)),  # json's own words
    )


def test_recipes_file_with_a_key_twice(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    (tmp_path / "twice.json").write_text('{"recipes": [{"id": "a", "args": ["-t", "1"], "args": ["-t", "2"], "measured": "m"}]}')
    assert serve_error("-m", gguf_file("plain"), "--recipes", "twice.json") == (2, at("twice.json", recipes.KEY_TWICE.format(key="args")))


def test_recipes_file_that_is_missing(gguf_file: FileFn, serve_error: ErrorFn) -> None:
    assert serve_error("-m", gguf_file("plain"), "--recipes", "mine.json") == (2, at("--recipes mine.json", NO_SUCH_FILE))


def test_recipes_file_that_is_a_directory(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    (tmp_path / "recipes.d").mkdir()
    assert serve_error("-m", gguf_file("plain"), "--recipes", "recipes.d") == (
        2,
        at("--recipes recipes.d", NOT_A_FILE.format(kind=bounded.A_DIRECTORY, what=A_RECIPES_FILE)),
    )


def test_recipes_file_that_is_not_utf8(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    (tmp_path / "latin1.json").write_bytes('{"about": "caf\u00e9", "recipes": []}'.encode("latin-1"))
    assert serve_error("-m", gguf_file("plain"), "--recipes", "latin1.json") == (2, at("latin1.json", recipes.NOT_UTF8.format(byte=14)))


def test_a_malformed_file_stops_serve_even_when_no_recipe_would_match(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    doc = {"recipes": [a_recipe(match={"device": ["cuda"]}), a_recipe(id="bad", measured=None)]}
    path = write_recipes(tmp_path / "later.json", doc)
    assert serve_error("-m", gguf_file("plain"), "--recipes", path) == (2, at("later.json", RECIPE.format(id="bad"), recipes.NO_MEASURED))
