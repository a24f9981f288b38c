"""Device argv, the common flags, pass-through after --, and the options serve refuses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from serve import cli, route, server
from serve.cli import main
from serve.errors import AT, DID_YOU_MEAN
from tests.support.route import DryRun

DryRunFn = Callable[..., DryRun]
ErrorFn = Callable[..., tuple[int, str]]
FileFn = Callable[[str], str]

COMMON = ["--jinja", "--host", "127.0.0.1", "--port", "8080"]


@pytest.mark.parametrize(
    ("device", "device_args"),
    [
        ("rocm", ["--device", "ROCm0", "-ngl", "99"]),
        ("vulkan", ["--device", "Vulkan0", "-ngl", "99"]),
        ("cuda", ["--device", "CUDA0", "-ngl", "99"]),
        ("cpu", ["-ngl", "0"]),
    ],
)
def test_device_argv(device: str, device_args: list[str], gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--device", device)
    assert r.argv == ["llama-server", "-m", "plain.gguf", *device_args, *COMMON]
    assert r.env == {}


@pytest.mark.parametrize(("device", "profile"), [("rocm", "gfx1151"), ("vulkan", "vulkan"), ("cuda", "cuda"), ("cpu", "cpu")])
def test_profile_follows_the_device(device: str, profile: str, gguf_file: FileFn, dry_run: DryRunFn, tmp_path: Path) -> None:
    r = dry_run("-m", gguf_file("plain"), "--device", device)
    assert cli.DECIDED.format(device=device, profile=profile, source=cli.NO_BUILD_YET) in r.stderr.splitlines()
    no_root = server.NO_ROOT.format(marker="pins.yaml", cwd=tmp_path, variable="ONEBIT_CI_ROOT")
    assert cli.LAUNCH_WOULD_STOP.format(problem=server.NO_BUILD.format(profile=profile, why=no_root)) in r.notes


def test_profile_option_overrides_the_device_default(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"), "--profile", "gfx1151-debug")
    assert cli.DECIDED.format(device="rocm", profile="gfx1151-debug", source=cli.NO_BUILD_YET) in r.stderr.splitlines()


def test_vulkan_with_flash_attention_ctx_host_and_port(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--device", "vulkan", "-fa", "-c", "16384", "--host", "0.0.0.0", "--port", "8123")
    assert r.argv == [
        "llama-server", "-m", "plain.gguf", "--device", "Vulkan0", "-ngl", "99", "-fa", "on",
        "--jinja", "-c", "16384", "--host", "0.0.0.0", "--port", "8123",
    ]  # fmt: skip


def test_flash_attn_takes_a_value(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--device", "cpu", "--flash-attn", "off")
    assert r.argv == ["llama-server", "-m", "plain.gguf", "-ngl", "0", "-fa", "off", *COMMON]


def test_flash_attn_on_rocm_keeps_the_default_and_says_why(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"), "-fa")
    assert "-fa" not in r.argv
    assert route.FLASH_ATTN_ON_ROCM.format(value="on") in r.notes


def test_extra_args_pass_through_in_order(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--", "-np", "1", "--metrics", "--temp", "-0.5")
    assert r.argv[-5:] == ["-np", "1", "--metrics", "--temp", "-0.5"]


def test_a_user_flag_after_double_dash_replaces_serve_own(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"), "--", "--n-gpu-layers", "40", "--port", "9000", "--no-jinja")
    assert r.argv == [
        "llama-server", "-m", "rotated-dense.gguf", "--device", "ROCm0", "--host", "127.0.0.1",
        "--n-gpu-layers", "40", "--port", "9000", "--no-jinja",
    ]  # fmt: skip
    assert route.REPLACED.format(given="--n-gpu-layers 40", own="-ngl 99") in r.notes
    assert route.REPLACED.format(given="--port 9000", own="--port 8080") in r.notes
    assert route.REPLACED.format(given="--no-jinja", own="--jinja") in r.notes
    assert r.env == {"GGML_W4A4_TENSORS": "all"}


def test_a_user_draft_length_after_double_dash_replaces_the_block_size_one(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--dflash", gguf_file("dflash-b8"), "--", "--draft-max", "3")
    assert "--spec-draft-n-max" not in r.argv
    assert r.argv[-2:] == ["--draft-max", "3"]


def test_mtp_head_with_mtp_max(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--device", "vulkan", "--mtp", gguf_file("mtp-head"), "--mtp-max", "3")
    assert r.argv == [
        "llama-server", "-m", "plain.gguf", "--device", "Vulkan0", "-ngl", "99", *COMMON,
        "--spec-type", "draft-mtp", "-md", "mtp-head.gguf", "-ngld", "99", "--spec-draft-n-max", "3",
    ]  # fmt: skip


def test_drafter_on_cpu_stays_on_cpu(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--device", "cpu", "--dflash", gguf_file("dflash-b8"))
    assert r.argv[r.argv.index("-ngld") + 1] == "0"


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (
            ["--device", "rcom"],
            2,
            AT.format(
                where="--device",
                problem=route.UNKNOWN_DEVICE.format(
                    device="rcom", suggestion=DID_YOU_MEAN.format(choice="rocm"), choices="auto, rocm, vulkan, cuda, cpu"
                ),
            ),
        ),
        (
            ["--devce", "rocm"],
            2,
            AT.format(where="--devce", problem=cli.UNKNOWN_OPTION.format(suggestion=DID_YOU_MEAN.format(choice="--device"))),
        ),
        (["-ub", "1024"], 2, AT.format(where="-ub", problem=cli.UNKNOWN_OPTION.format(suggestion=""))),
        (["--port", "http"], 2, cli.SEE_HELP.format(message="argument --port: invalid int value: 'http'")),  # argparse's message
        (["--port", "70000"], 2, AT.format(where="--port", problem=route.NOT_A_PORT.format(port=70000))),
        (["-c", "-1"], 2, AT.format(where="--ctx-size", problem=route.NEGATIVE_CTX_SIZE.format(ctx_size=-1))),
        (["-fa", "yes"], 2, AT.format(where="--flash-attn", problem=route.NOT_A_CHOICE.format(value="yes", choices="on, off, auto"))),
        (["--mtp-max", "5"], 2, AT.format(where="--mtp-max", problem=route.DRAFT_LENGTH_WITHOUT_DRAFTER)),
        (["--mtp-p-min", "0.5"], 2, AT.format(where="--mtp-p-min", problem=route.P_MIN_WITHOUT_DRAFTER)),
        (["--profile", "../x"], 2, AT.format(where="--profile", problem=route.NOT_A_PROFILE_NAME.format(profile="../x"))),
        (["--", "-m", "other.gguf"], 2, AT.format(where="-m after --", problem=route.MODEL_AFTER_DOUBLE_DASH)),
        (["extra.gguf"], 2, cli.SEE_HELP.format(message=cli.UNEXPECTED_ARGUMENT.format(argument="extra.gguf"))),
        # a path given as "": before, --mtp '' was a traceback, --dflash '' a launch without the drafter asked for
        (["--mtp", ""], 2, AT.format(where="--mtp", problem=route.EMPTY_PATH.format(what="a GGUF file"))),
        (["--dflash", ""], 2, AT.format(where="--dflash", problem=route.EMPTY_PATH.format(what="a GGUF file"))),
        (["--recipes", ""], 2, AT.format(where="--recipes", problem=route.EMPTY_PATH.format(what="a recipes file"))),
        (["--llama-server", ""], 2, AT.format(where="--llama-server", problem=route.EMPTY_PATH.format(what="llama-server"))),
    ],
)
def test_refused_options(args: list[str], code: int, line: str, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    assert serve_error("-m", gguf_file("plain"), *args) == (code, line)


def test_dflash_and_mtp_together_are_refused_before_any_file_is_read(gguf_file: FileFn, serve_error: ErrorFn) -> None:
    assert serve_error("-m", gguf_file("plain"), "--dflash", "missing-a.gguf", "--mtp", "missing-b.gguf") == (4, route.TWO_DRAFTERS)


@pytest.mark.parametrize(("p", "ok"), [("0", True), ("1", True), ("0.75", True), ("1.5", False), ("nan", False), ("low", False)])
def test_mtp_p_min_is_a_probability(p: str, ok: bool, gguf_file: FileFn, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "-m", gguf_file("plain"), "--dflash", gguf_file("dflash"), "--mtp-p-min", p, "--dry-run"])
    err = capsys.readouterr().err
    assert (code == 0) is ok
    if not ok:
        problem = AT.format(where="--mtp-p-min", problem=route.NOT_A_PROBABILITY.format(value=p))
        assert err == cli.ERROR.format(prog=cli.SERVE, problem=problem) + "\n"


def test_bad_onebit_serve_device(gguf_file: FileFn, serve_error: ErrorFn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEBIT_SERVE_DEVICE", "vulcan")
    problem = route.NOT_A_DEVICE.format(value="vulcan", suggestion=DID_YOU_MEAN.format(choice="vulkan"), choices="rocm, vulkan, cuda, cpu")
    assert serve_error("-m", gguf_file("plain")) == (2, AT.format(where="ONEBIT_SERVE_DEVICE", problem=problem))


def test_an_empty_model_path_names_the_flag(serve_error: ErrorFn) -> None:
    assert serve_error("-m", "") == (2, AT.format(where="-m", problem=route.EMPTY_PATH.format(what="a GGUF file")))


def test_missing_model_option(serve_error: ErrorFn) -> None:
    assert serve_error() == (2, cli.SEE_HELP.format(message="the following arguments are required: -m/--model"))  # argparse's message


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serv", "-m", "x.gguf"]) == 2
    problem = cli.UNKNOWN_COMMAND.format(command="serv", suggestion=DID_YOU_MEAN.format(choice="serve"), commands="serve")
    assert capsys.readouterr().err == cli.ERROR.format(prog=cli.PROG, problem=problem) + "\n"
