"""A recipe tunes llama-server; it never changes where it listens, what it loads or where it writes (issue 36).

llama-server reads every flag of its own from a variable too (``LLAMA_ARG_<FLAG>``, common/arg.cpp), so a recipe's
env could still point it at an RPC server (LLAMA_ARG_RPC), open it to the network (LLAMA_ARG_HOST) or have it write a
log anywhere (LLAMA_LOG_FILE), and its args could do the same with the flags themselves. Each is one line naming the
recipes file, the recipe and the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serve import recipes
from serve.cli import main
from serve.errors import AT
from tests.support.gguf_files import make
from tests.support.route import ERROR_PREFIX


@pytest.fixture(autouse=True)
def _own_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("ONEBIT_SERVE_DEVICE", "GGML_W4A4_TENSORS", "ONEBIT_CI_ROOT", "ONEBIT_SERVE_RELEASE", *REFUSED_ENV, *KNOBS):
        monkeypatch.delenv(var, raising=False)


def serve(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["serve", *args, "--dry-run"])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The exit code and the one error line, its prefix off."""
    code, out, err = serve(capsys, *args)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(ERROR_PREFIX)
    return code, lines[0][len(ERROR_PREFIX) :]

REFUSED_ENV = {
    # the campaign's three
    "LLAMA_ARG_RPC": recipes.ENV_IS_A_FLAG,
    "LLAMA_ARG_HOST": recipes.ENV_IS_A_FLAG,
    "LLAMA_LOG_FILE": recipes.ENV_SHAPES_LAUNCH,
    # the rest of llama-server's flags as variables: where it listens, what it loads, where it writes
    "LLAMA_ARG_PORT": recipes.ENV_IS_A_FLAG,
    "LLAMA_ARG_MODEL": recipes.ENV_IS_A_FLAG,
    "LLAMA_ARG_MODEL_URL": recipes.ENV_IS_A_FLAG,
    "LLAMA_ARG_HF_REPO": recipes.ENV_IS_A_FLAG,
    "LLAMA_ARG_API_KEY": recipes.ENV_IS_A_FLAG,
    "LLAMA_ARG_SSL_KEY_FILE": recipes.ENV_IS_A_FLAG,
    "LLAMA_ARG_STATIC_PATH": recipes.ENV_IS_A_FLAG,
    "LLAMA_ARG_SLOT_SAVE_PATH": recipes.ENV_IS_A_FLAG,
    "LLAMA_ARG_UBATCH": recipes.ENV_IS_A_FLAG,  # even a knob: a flag goes in args, where the user's own wins
    "LLAMA_CACHE": recipes.ENV_SHAPES_LAUNCH,  # where -hf downloads go
    # the GPU stacks' own writers
    "AMD_LOG_LEVEL_FILE": recipes.ENV_SHAPES_LAUNCH,
    "HIPBLASLT_LOG_FILE": recipes.ENV_SHAPES_LAUNCH,
    "MIOPEN_CUSTOM_CACHE_DIR": recipes.ENV_SHAPES_LAUNCH,
    "ROCBLAS_TENSILE_DUMP": recipes.ENV_SHAPES_LAUNCH,
    "GGML_RPC_ENDPOINT": recipes.ENV_SHAPES_LAUNCH,
}

REFUSED_ARGS = (
    ["--rpc", "10.0.0.9:50052"],
    ["--log-file", "/tmp/x.log"],
    ["--host", "0.0.0.0"],
    ["--port", "80"],
    ["--path", "/"],
    ["--api-key", "k"],
    ["--ssl-key-file", "k.pem"],
    ["-hf", "someone/model"],
    ["-mu", "http://example.invalid/m.gguf"],
    ["--lora", "l.gguf"],
    ["--mmproj", "p.gguf"],
    ["--slot-save-path", "/tmp"],
    ["--chat-template-file", "t.jinja"],
    ["-b", "4096", "--rpc=10.0.0.9:50052"],
)

KNOBS = {"GGML_VK_PREFER_HOST_MEMORY": "1", "RADV_PERFTEST": "coop_matrix", "GGML_CUDA_FORCE_MMQ": "1", "LLAMA_LOG_VERBOSITY": "1"}


def recipe(**fields: Any) -> dict[str, Any]:
    return {"id": "x", "measured": "1.0 -> 1.1", **fields}


def write(path: Path, *items: dict[str, Any]) -> str:
    path.write_text(json.dumps({"recipes": list(items)}))
    return path.name


@pytest.mark.parametrize(("name", "template"), sorted(REFUSED_ENV.items()))
def test_a_recipe_env_that_shapes_the_launch_is_one_line_naming_file_recipe_and_key(
    name: str, template: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = write(tmp_path / "mine.json", recipe(env={name: "1"}))
    code, line = refused(capsys, "-m", make("plain", tmp_path), "--recipes", mine)
    assert code == 2
    assert line == AT.format(where=mine, problem=AT.format(where=f'recipe "x": env.{name}', problem=template))


@pytest.mark.parametrize("args", REFUSED_ARGS, ids=lambda a: " ".join(a))
def test_recipe_args_that_shape_the_launch_are_one_line_naming_the_flag(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = write(tmp_path / "mine.json", recipe(args=args))
    code, line = refused(capsys, "-m", make("plain", tmp_path), "--recipes", mine)
    assert code == 2
    flag = next(a for a in args if a.split("=")[0] not in ("-b",) and a.startswith("-")).split("=")[0]
    assert line == AT.format(where=mine, problem=AT.format(where='recipe "x": args', problem=recipes.ARG_SHAPES_LAUNCH.format(flag=flag)))


def test_knobs_still_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = write(tmp_path / "mine.json", recipe(env=KNOBS, args=["-b", "4096", "-t", "8"]))
    code, out, err = serve(capsys, "-m", make("plain", tmp_path), "--recipes", mine)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["env"] == KNOBS
    assert doc["recipes"] == ["x"]


def test_the_builtin_recipes_load() -> None:
    assert recipes.builtin().ids
