"""recipes_route: tuned settings as data (the engine's recipes_route checks, and every malformed file)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from serve import recipes
from tests.support.route import DryRun

ROCM = ["--device", "ROCm0", "-ngl", "99", "--jinja", "--host", "127.0.0.1", "--port", "8080"]

DryRunFn = Callable[..., DryRun]
ErrorFn = Callable[..., tuple[int, str]]
FileFn = Callable[[str], str]


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
    assert r.recipe_lines() == ["1bit serve: recipe rotated-moe-ub1024: -ub 1024"]
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
    assert "recipes off (--no-recipes)" in r.notes


def test_dflash_gets_p_min_0_exactly_once(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--dflash", gguf_file("dflash-b8"))
    assert r.argv.count("--spec-draft-p-min") == 1
    assert r.argv[r.argv.index("--spec-draft-p-min") + 1] == "0"
    assert r.recipe_lines() == ["1bit serve: recipe dflash-p-min-0: --spec-draft-p-min 0"]


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
    assert "recipe rotated-moe-ub1024 matches, but -ub is already given: adds nothing" in r.notes


def test_user_draft_p_min_alias_after_double_dash_beats_the_recipe(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--dflash", gguf_file("dflash"), "--", "--draft-p-min", "0.2")
    assert r.argv[-2:] == ["--draft-p-min", "0.2"]
    assert "--spec-draft-p-min" not in r.argv
    assert r.recipes == []


def test_builtin_recipes_carry_their_measurements() -> None:
    builtin = recipes.builtin()
    assert builtin.ids == ("rotated-moe-ub1024", "dflash-p-min-0")
    ub, pmin = builtin.recipes
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
    assert r.recipe_lines() == ["1bit serve: recipe mine: -b 4096 ONEBIT_TEST_KNOB=1"]


def test_recipe_env_never_overrides_the_environment(
    tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONEBIT_TEST_KNOB", "0")
    mine = write_recipes(tmp_path / "mine.json", {"recipes": [a_recipe()]})
    r = dry_run("-m", gguf_file("plain-moe"), "--recipes", mine)
    assert r.env == {}
    assert r.argv[-2:] == ["-b", "4096"]
    assert r.recipe_lines() == ["1bit serve: recipe mine: -b 4096"]
    assert "recipe mine matches, but ONEBIT_TEST_KNOB is already given: adds the rest" in r.notes


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
    assert r.recipe_lines() == ["1bit serve: recipe first: --batch-size 2048", "1bit serve: recipe second: -t 8"]


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


def test_recipes_and_no_recipes_together_are_refused(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    mine = write_recipes(tmp_path / "mine.json", {"recipes": [a_recipe()]})
    assert serve_error("-m", gguf_file("plain"), "--recipes", mine, "--no-recipes") == (2, "--recipes FILE and --no-recipes: pick one")


# -- malformed files: each stops serve with one line naming the file and the problem --------------------------

MALFORMED: list[tuple[str, object, str]] = [
    ("unknown-key", {"recipes": [a_recipe(mesured="x")]},
     'recipe "mine": unknown key "mesured" (did you mean "measured"?); known: id, match, args, env, why, measured, source, check'),
    ("unknown-top-key", {"recipes": [], "recipe": []},
     'unknown key "recipe" (did you mean "recipes"?); known: about, recipes'),
    ("unknown-match-key", {"recipes": [a_recipe(match={"archtecture": ["qwen3moe"]})]},
     'recipe "mine": unknown match key "archtecture" (did you mean "architecture"?); known: device, architecture, drafter, moe, hadamard_q4_0'),
    ("unknown-device", {"recipes": [a_recipe(match={"device": ["rcom"]})]},
     'recipe "mine": match.device: unknown device "rcom" (did you mean "rocm"?); known: rocm, vulkan, cuda, cpu'),
    ("unknown-drafter", {"recipes": [a_recipe(match={"drafter": ["dflsh"]})]},
     'recipe "mine": match.drafter: unknown drafter "dflsh" (did you mean "dflash"?); known: dflash, mtp, none'),
    ("id-twice", {"recipes": [a_recipe(), a_recipe(args=["-t", "4"])]},
     'id "mine" is listed twice (recipes[0] and recipes[1])'),
    ("adds-nothing", {"recipes": [a_recipe(args=None, env=None)]},
     'recipe "mine": adds nothing: give it args or env'),
    ("adds-nothing-empty", {"recipes": [a_recipe(args=[], env={})]},
     'recipe "mine": adds nothing: give it args or env'),
    ("args-no-flag", {"recipes": [a_recipe(args=["1024", "-ub"])]},
     'recipe "mine": args must start with a flag (-x or --xy), not "1024"'),
    ("args-negative-number", {"recipes": [a_recipe(args=["-1"])]},
     'recipe "mine": args must start with a flag (-x or --xy), not "-1"'),
    ("no-measured", {"recipes": [a_recipe(measured=None)]},
     'recipe "mine": has no "measured": a recipe without a measurement does not load'),
    ("empty-measured", {"recipes": [a_recipe(measured="")]},
     'recipe "mine": "measured" is empty: a recipe without a measurement does not load'),
    ("blank-measured", {"recipes": [a_recipe(measured="  \t ")]},
     'recipe "mine": "measured" is empty: a recipe without a measurement does not load'),
    ("measured-not-string", {"recipes": [a_recipe(measured=2158)]},
     'recipe "mine": measured: 2158 is a non-string; expected a string'),
    ("recipes-not-list", {"recipes": {"id": "mine"}},
     "recipes: an object is not a list"),
    ("args-not-list", {"recipes": [a_recipe(args="-ub 1024")]},
     'recipe "mine": args: "-ub 1024" is not a list'),
    ("match-list-not-list", {"recipes": [a_recipe(match={"device": "rocm"})]},
     'recipe "mine": match.device: "rocm" is not a list'),
    ("args-non-string", {"recipes": [a_recipe(args=["-ub", 1024])]},
     'recipe "mine": args[1]: 1024 is a non-string; every entry must be a string'),
    ("match-non-string", {"recipes": [a_recipe(match={"architecture": [7]})]},
     'recipe "mine": match.architecture[0]: 7 is a non-string; every entry must be a string'),
    ("env-value-non-string", {"recipes": [a_recipe(env={"GGML_W4A4_TENSORS": 1})]},
     'recipe "mine": env.GGML_W4A4_TENSORS: 1 is a non-string; expected a string'),
    ("why-non-string", {"recipes": [a_recipe(why=["a", "b"])]},
     'recipe "mine": why: a list is a non-string; expected a string'),
    ("env-not-object", {"recipes": [a_recipe(env=["GGML_W4A4_TENSORS=all"])]},
     'recipe "mine": env is a list, not an object ({"NAME": "value"})'),
    ("env-bad-name", {"recipes": [a_recipe(env={"GGML W4A4": "all"})]},
     'recipe "mine": env: "GGML W4A4" is not an environment variable name'),
    ("moe-not-boolean", {"recipes": [a_recipe(match={"moe": "true"})]},
     'recipe "mine": match.moe: "true" is not a boolean (true or false)'),
    ("hadamard-not-boolean", {"recipes": [a_recipe(match={"hadamard_q4_0": 32})]},
     'recipe "mine": match.hadamard_q4_0: 32 is not a boolean (true or false)'),
    ("match-not-object", {"recipes": [a_recipe(match=["rocm"])]},
     'recipe "mine": match: a list is not an object'),
    ("empty-match-list", {"recipes": [a_recipe(match={"device": []})]},
     'recipe "mine": match.device: is an empty list, which matches nothing; omit the key to match anything'),
    ("no-id", {"recipes": [a_recipe(id=None)]},
     'recipes[0]: has no "id"'),
    ("blank-id", {"recipes": [a_recipe(id=" ")]},
     "recipes[0].id: is empty"),
    ("id-with-space", {"recipes": [a_recipe(id="my recipe")]},
     "recipes[0].id: \"my recipe\": an id is letters, digits, '.', '_' and '-'"),
    ("recipe-not-object", {"recipes": ["rotated-moe-ub1024"]},
     'recipes[0]: "rotated-moe-ub1024" is not an object'),
    ("no-recipes-key", {"about": "nothing"},
     'has no "recipes" list'),
    ("top-not-object", [a_recipe()],
     'a list is not an object; expected {"about": ..., "recipes": [...]}'),
    ("about-non-string", {"about": 1, "recipes": []},
     "about: 1 is a non-string; expected a string"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "doc", "problem"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_recipes_file_stops_serve(
    name: str, doc: object, problem: str, tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn
) -> None:
    path = write_recipes(tmp_path / f"{name}.json", doc)
    assert serve_error("-m", gguf_file("plain"), "--recipes", path) == (2, f"{name}.json: {problem}")


def test_recipes_file_that_is_not_json(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    (tmp_path / "broken.json").write_text('{"recipes": [}\n')
    assert serve_error("-m", gguf_file("plain"), "--recipes", "broken.json") == (
        2,
        "broken.json: not JSON: Expecting value at line 1 column 14",
    )


def test_recipes_file_with_a_key_twice(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    (tmp_path / "twice.json").write_text('{"recipes": [{"id": "a", "args": ["-t", "1"], "args": ["-t", "2"], "measured": "m"}]}')
    assert serve_error("-m", gguf_file("plain"), "--recipes", "twice.json") == (2, 'twice.json: key "args" is given twice in one object')


def test_recipes_file_that_is_missing(gguf_file: FileFn, serve_error: ErrorFn) -> None:
    assert serve_error("-m", gguf_file("plain"), "--recipes", "mine.json") == (2, "mine.json: no such file")


def test_recipes_file_that_is_a_directory(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    (tmp_path / "recipes.d").mkdir()
    assert serve_error("-m", gguf_file("plain"), "--recipes", "recipes.d") == (2, "recipes.d: is a directory, not a recipes file")


def test_recipes_file_that_is_not_utf8(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    (tmp_path / "latin1.json").write_bytes('{"about": "caf\u00e9", "recipes": []}'.encode("latin-1"))
    assert serve_error("-m", gguf_file("plain"), "--recipes", "latin1.json") == (2, "latin1.json: is not UTF-8 (byte 14)")


def test_a_malformed_file_stops_serve_even_when_no_recipe_would_match(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    doc = {"recipes": [a_recipe(match={"device": ["cuda"]}), a_recipe(id="bad", measured=None)]}
    path = write_recipes(tmp_path / "later.json", doc)
    assert serve_error("-m", gguf_file("plain"), "--recipes", path) == (
        2,
        'later.json: recipe "bad": has no "measured": a recipe without a measurement does not load',
    )
