"""Device argv, the common flags, pass-through after --, and the options serve refuses."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from serve.cli import main
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
def test_profile_follows_the_device(device: str, profile: str, gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--device", device)
    assert f"1bit serve: device {device}, profile {profile}, llama-server from no build yet (dry run)" in r.stderr.splitlines()
    assert any(f"there is no build for profile {profile}" in note for note in r.notes)


def test_profile_option_overrides_the_device_default(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"), "--profile", "gfx1151-debug")
    assert "1bit serve: device rocm, profile gfx1151-debug, llama-server from no build yet (dry run)" in r.stderr.splitlines()


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
    assert any(note.startswith("-fa on: not passed on rocm") and "337 t/s" in note for note in r.notes)


def test_extra_args_pass_through_in_order(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("plain"), "--", "-np", "1", "--metrics", "--temp", "-0.5")
    assert r.argv[-5:] == ["-np", "1", "--metrics", "--temp", "-0.5"]


def test_a_user_flag_after_double_dash_replaces_serve_own(gguf_file: FileFn, dry_run: DryRunFn) -> None:
    r = dry_run("-m", gguf_file("rotated-dense"), "--", "--n-gpu-layers", "40", "--port", "9000", "--no-jinja")
    assert r.argv == [
        "llama-server", "-m", "rotated-dense.gguf", "--device", "ROCm0", "--host", "127.0.0.1",
        "--n-gpu-layers", "40", "--port", "9000", "--no-jinja",
    ]  # fmt: skip
    assert '"--n-gpu-layers 40" after -- replaces serve\'s "-ngl 99"' in r.notes
    assert '"--port 9000" after -- replaces serve\'s "--port 8080"' in r.notes
    assert '"--no-jinja" after -- replaces serve\'s "--jinja"' in r.notes
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
        (["--device", "rcom"], 2, '--device: unknown device "rcom" (did you mean "rocm"?); choose from auto, rocm, vulkan, cuda, cpu'),
        (["--devce", "rocm"], 2, '--devce: unknown option (did you mean "--device"?); llama-server\'s own flags go after --'),
        (["-ub", "1024"], 2, "-ub: unknown option; llama-server's own flags go after --"),
        (["--port", "http"], 2, "argument --port: invalid int value: 'http' (1bit serve --help)"),
        (["--port", "70000"], 2, "--port: 70000 is not a TCP port (1-65535)"),
        (["-c", "-1"], 2, "--ctx-size: -1 is negative (0 takes the model's own context)"),
        (["-fa", "yes"], 2, '--flash-attn: "yes" is not one of on, off, auto'),
        (["--mtp-max", "5"], 2, "--mtp-max: sets the draft length of a drafter: give --dflash DRAFT.gguf or --mtp HEAD.gguf"),
        (["--mtp-p-min", "0.5"], 2, "--mtp-p-min: sets the drafter's minimum probability: give --dflash DRAFT.gguf or --mtp HEAD.gguf"),
        (["--profile", "../x"], 2, '--profile: "../x" is not a profile name (letters, digits, ".", "_", "-")'),
        (
            ["--", "-m", "other.gguf"],
            2,
            "-m after --: the model is 1bit serve's -m MODEL.gguf, before --: its GGUF header decides the route",
        ),
        (["extra.gguf"], 2, "unexpected argument 'extra.gguf': the model is -m MODEL.gguf (1bit serve --help)"),
    ],
)
def test_refused_options(args: list[str], code: int, line: str, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    assert serve_error("-m", gguf_file("plain"), *args) == (code, line)


def test_dflash_and_mtp_together_are_refused_before_any_file_is_read(gguf_file: FileFn, serve_error: ErrorFn) -> None:
    assert serve_error("-m", gguf_file("plain"), "--dflash", "missing-a.gguf", "--mtp", "missing-b.gguf") == (
        4,
        "--dflash and --mtp are two drafters; pick one",
    )


@pytest.mark.parametrize(("p", "ok"), [("0", True), ("1", True), ("0.75", True), ("1.5", False), ("nan", False), ("low", False)])
def test_mtp_p_min_is_a_probability(p: str, ok: bool, gguf_file: FileFn, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "-m", gguf_file("plain"), "--dflash", gguf_file("dflash"), "--mtp-p-min", p, "--dry-run"])
    err = capsys.readouterr().err
    assert (code == 0) is ok
    if not ok:
        assert err == f'1bit serve: error: --mtp-p-min: "{p}" is not a probability (0 to 1)\n'


def test_bad_onebit_serve_device(gguf_file: FileFn, serve_error: ErrorFn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEBIT_SERVE_DEVICE", "vulcan")
    assert serve_error("-m", gguf_file("plain")) == (
        2,
        'ONEBIT_SERVE_DEVICE: "vulcan" is not a device (did you mean "vulkan"?); choose from rocm, vulkan, cuda, cpu',
    )


def test_missing_model_option(serve_error: ErrorFn) -> None:
    assert serve_error() == (2, "the following arguments are required: -m/--model (1bit serve --help)")


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serv", "-m", "x.gguf"]) == 2
    assert capsys.readouterr().err == "1bit: error: unknown command 'serv' (did you mean \"serve\"?); commands: serve\n"
