"""hadamard_route: the lean ROCm route for Hadamard-rotated files (the engine's tests/hadamard_route.sh cases)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from serve import route
from serve.errors import AT
from tests.support.gguf_files import write_gguf
from tests.support.route import DryRun

ROCM = ["--device", "ROCm0", "-ngl", "99", "--jinja", "--host", "127.0.0.1", "--port", "8080"]
VULKAN = ["--device", "Vulkan0", "-ngl", "99", "--jinja", "--host", "127.0.0.1", "--port", "8080"]

DryRunFn = Callable[..., DryRun]
ErrorFn = Callable[..., tuple[int, str]]
FileFn = Callable[[str], str]


@pytest.mark.parametrize("device", ["vulkan", "cpu"])
def test_rotated_file_on_vulkan_or_cpu_is_refused(device: str, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    code, line = serve_error("-m", gguf_file("rotated-dense"), "--device", device)
    assert code == 4
    assert line == AT.format(where="rotated-dense.gguf", problem=route.ROTATED_REFUSED.format(key="onebit.hadamard_q4_0", group=32))


def test_rotated_file_on_auto_takes_rocm0_with_w4a4(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"))
    assert r.argv == ["llama-server", "-m", "rotated-dense.gguf", *ROCM]
    assert r.env == {"GGML_W4A4_TENSORS": "all"}
    assert route.LEAN_ROCM in r.notes
    assert route.AUTO_DEVICE.format(device="rocm", why=route.AUTO_ROTATED) in r.notes


def test_preset_empty_w4a4_is_kept(gguf_file: FileFn, dry_run: DryRunFn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_W4A4_TENSORS", "")
    r = dry_run("-m", gguf_file("rotated-dense"))
    assert r.argv == ["llama-server", "-m", "rotated-dense.gguf", *ROCM]
    assert r.env == {}
    assert route.W4A4_KEPT.format(variable="GGML_W4A4_TENSORS", value="", meaning=route.EXACT_INT8) in r.notes


def test_preset_w4a4_value_is_kept(gguf_file: FileFn, dry_run: DryRunFn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_W4A4_TENSORS", "ffn_down")
    r = dry_run("-m", gguf_file("rotated-dense"), "--device", "rocm")
    assert r.env == {}
    assert route.W4A4_KEPT.format(variable="GGML_W4A4_TENSORS", value="ffn_down", meaning="") in r.notes


def test_plain_file_takes_the_default_device_and_no_ggml_variables(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"))
    assert r.argv == ["llama-server", "-m", "plain.gguf", *VULKAN]
    assert r.env == {}
    assert not [name for name in r.env if name.startswith("GGML_")]
    assert route.AUTO_DEVICE.format(device="vulkan", why=route.AUTO_DEFAULT.format(variable="ONEBIT_SERVE_DEVICE")) in r.notes


def test_plain_file_follows_onebit_serve_device(gguf_file: FileFn, dry_run: DryRunFn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEBIT_SERVE_DEVICE", "rocm")
    r = dry_run("-m", gguf_file("plain"))
    assert r.argv == ["llama-server", "-m", "plain.gguf", *ROCM]
    assert r.env == {}, "W4A4 is for rotated files only"
    assert route.AUTO_DEVICE.format(device="rocm", why=route.AUTO_FROM_VARIABLE.format(variable="ONEBIT_SERVE_DEVICE")) in r.notes


def test_rotated_file_wins_over_onebit_serve_device(gguf_file: FileFn, dry_run: DryRunFn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEBIT_SERVE_DEVICE", "vulkan")
    r = dry_run("-m", gguf_file("rotated-moe"))
    assert r.argv[3:5] == ["--device", "ROCm0"]


def test_rotated_dense_gets_no_ubatch(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"))
    assert "-ub" not in r.argv
    assert "--ubatch-size" not in r.argv
    assert r.recipes == []


def test_rotated_moe_gets_ubatch_1024(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-moe"))
    assert r.argv == ["llama-server", "-m", "rotated-moe.gguf", *ROCM, "-ub", "1024"]
    assert r.env == {"GGML_W4A4_TENSORS": "all"}
    assert r.recipes == ["rotated-moe-ub1024"]


def test_dflash_without_block_size_stays_on_rocm0_with_n_max_16_and_p_min_0(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"), "--dflash", gguf_file("dflash"))
    assert r.argv == [
        "llama-server", "-m", "rotated-dense.gguf", *ROCM,
        "--spec-type", "draft-dflash", "-md", "dflash.gguf", "-ngld", "99", "--spec-draft-n-max", "16",
        "--spec-draft-p-min", "0",
    ]  # fmt: skip
    assert r.env == {"GGML_W4A4_TENSORS": "all"}
    assert r.recipes == ["dflash-p-min-0"]
    assert route.DRAFT_LENGTH.format(length=16, why=route.NO_BLOCK_SIZE) in r.notes


def test_dflash_block_size_8_drafts_7(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"), "--dflash", gguf_file("dflash-b8"))
    n_max = r.argv.index("--spec-draft-n-max")
    assert r.argv[n_max + 1] == "7"
    assert r.argv.count("--spec-draft-n-max") == 1
    assert route.DRAFT_LENGTH.format(length=7, why=route.FROM_BLOCK_SIZE.format(architecture="dflash", block_size=8)) in r.notes


def test_dflash_block_size_1_falls_back_to_16(dry_run: DryRunFn, gguf_file: FileFn) -> None:
    write_gguf(Path("dflash-b1.gguf"), "dflash", {"dflash.block_size": 1})
    r = dry_run("-m", gguf_file("rotated-dense"), "--dflash", "dflash-b1.gguf")
    assert r.argv[r.argv.index("--spec-draft-n-max") + 1] == "16"


def test_mtp_max_5_sets_the_draft_length(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"), "--dflash", gguf_file("dflash-b8"), "--mtp-max", "5")
    assert r.argv[r.argv.index("--spec-draft-n-max") + 1] == "5"
    assert r.argv.count("--spec-draft-n-max") == 1
    assert route.DRAFT_LENGTH.format(length=5, why="--mtp-max") in r.notes


def test_rotated_moe_with_dflash_gets_both_recipes_in_file_order(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-moe"), "--dflash", gguf_file("dflash-b8"))
    assert r.argv[-4:] == ["-ub", "1024", "--spec-draft-p-min", "0"]
    assert r.recipes == ["rotated-moe-ub1024", "dflash-p-min-0"]
    assert r.env == {"GGML_W4A4_TENSORS": "all"}


def test_mtp_head_on_a_rotated_file_stays_on_rocm0(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"), "--mtp", gguf_file("mtp-head"), "--mtp-p-min", "0.6")
    assert r.argv == [
        "llama-server", "-m", "rotated-dense.gguf", *ROCM,
        "--spec-type", "draft-mtp", "-md", "mtp-head.gguf", "-ngld", "99", "--spec-draft-p-min", "0.6",
    ]  # fmt: skip
    assert r.env == {"GGML_W4A4_TENSORS": "all"}
    assert r.recipes == [], "dflash-p-min-0 is for DFlash drafters only"


def test_other_hadamard_stamp_is_not_treated_as_rotated(dry_run: DryRunFn) -> None:
    write_gguf(Path("h16.gguf"), "qwen35", {"onebit.hadamard_q4_0": 16})
    r = dry_run("-m", "h16.gguf", "--device", "vulkan")
    assert r.argv == ["llama-server", "-m", "h16.gguf", *VULKAN]
    assert route.OTHER_STAMP.format(key="onebit.hadamard_q4_0", stamp=16, group=32) in r.notes


def test_rotated_file_on_cuda_runs_without_w4a4_and_says_so(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"), "--device", "cuda")
    assert r.argv[3:7] == ["--device", "CUDA0", "-ngl", "99"]
    assert r.env == {}
    assert route.ROTATED_ELSEWHERE.format(device="cuda") in r.notes
