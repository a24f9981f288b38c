"""The exec path: finding llama-server, and real launches against a recording stand-in for it."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from serve import cli, identity, server
from serve.cli import main
from serve.errors import AT, FLAG_PATH, NO_SUCH_FILE
from tests.support.route import DryRun
from tests.support.stand_in import EXIT_ON_SIGNAL, free_port, is_running, wait_until_healthy, write_manifest, write_stand_in

REPO = Path(__file__).resolve().parents[2]

DryRunFn = Callable[..., DryRun]
ErrorFn = Callable[..., tuple[int, str]]
FileFn = Callable[[str], str]


def launcher_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def launch(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "serve", "serve", *args], cwd=cwd, env=launcher_env(), stderr=subprocess.PIPE, text=True)


def signal_and_reap(launcher: subprocess.Popen[str], signum: signal.Signals) -> tuple[int, str]:
    try:
        launcher.send_signal(signum)
        code = launcher.wait(timeout=10)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.stderr is not None
    return code, launcher.stderr.read()


# -- real launches against the stand-in ----------------------------------------------------------------------


def test_launch_with_stand_in_server_forwards_sigterm_and_exits_with_its_status(
    tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn
) -> None:
    write_stand_in(tmp_path / "stand-in-server", tmp_path / "record.json")
    port = free_port()
    args = ["-m", gguf_file("rotated-moe"), "--llama-server", "./stand-in-server", "--port", str(port)]
    planned = dry_run(*args)
    assert planned.argv[0] == "./stand-in-server"

    with launch(args, tmp_path) as launcher:
        record = wait_until_healthy(tmp_path / "record.json", port, launcher)
        assert record["argv"] == planned.args, "the child runs exactly the dry-run's command line"
        assert record["env"] == {**launcher_env(), **planned.env}, "the environment plus exactly what serve added"
        assert planned.env == {"GGML_W4A4_TENSORS": "all"}
        assert record["ppid"] == launcher.pid, "llama-server is the launcher's own child"
        assert record["pgid"] == record["pid"], "in its own process group: a terminal's Ctrl-C reaches it once, through serve"
        code, stderr = signal_and_reap(launcher, signal.SIGTERM)

    child = record["pid"]
    assert isinstance(child, int)
    assert code == EXIT_ON_SIGNAL["SIGTERM"], stderr
    assert json.loads((tmp_path / "record.json.signal").read_text()) == {"signal": "SIGTERM"}
    assert not is_running(child), "the launcher reaped its child before it exited"
    assert not is_running(launcher.pid)
    assert cli.RECIPE_APPLIED.format(id="rotated-moe-ub1024", added="-ub 1024") in stderr.splitlines()
    assert cli.STARTED.format(pid=child, host="127.0.0.1", port=port) in stderr.splitlines()


def test_launch_with_stand_in_server_from_the_build_manifest_forwards_sigint(tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn) -> None:
    (tmp_path / "pins.yaml").write_text("# marks the onebit-ci root for this case\n")
    binary = write_stand_in(tmp_path / "build" / "gfx1151" / "bin" / "llama-server", tmp_path / "record.json")
    write_manifest(tmp_path, "gfx1151", binary)
    port = free_port()
    args = ["-m", gguf_file("rotated-dense"), "--dflash", gguf_file("dflash-b8"), "--port", str(port)]
    planned = dry_run(*args)
    assert planned.argv[0] == str(binary.resolve())
    assert planned.argv[1:] == [
        "-m", "rotated-dense.gguf", "--device", "ROCm0", "-ngl", "99", "--jinja", "--host", "127.0.0.1", "--port", str(port),
        "--spec-type", "draft-dflash", "-md", "dflash-b8.gguf", "-ngld", "99", "--spec-draft-n-max", "7", "--spec-draft-p-min", "0",
    ]  # fmt: skip

    with launch(args, tmp_path) as launcher:
        record = wait_until_healthy(tmp_path / "record.json", port, launcher)
        assert record["argv"] == planned.args
        assert record["env"] == {**launcher_env(), **planned.env}
        code, stderr = signal_and_reap(launcher, signal.SIGINT)

    child = record["pid"]
    assert isinstance(child, int)
    assert code == EXIT_ON_SIGNAL["SIGINT"], stderr
    assert json.loads((tmp_path / "record.json.signal").read_text()) == {"signal": "SIGINT"}
    assert not is_running(child)
    assert not is_running(launcher.pid)
    assert cli.DECIDED.format(device="rocm", profile="gfx1151", source="build/gfx1151/build.json") in stderr.splitlines()


def test_launch_with_stand_in_server_in_process_returns_the_status_it_exits_with(
    tmp_path: Path, gguf_file: FileFn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAND_IN_EXIT", "3")
    write_stand_in(tmp_path / "stand-in-server", tmp_path / "record.json")
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    code = main(["serve", "-m", gguf_file("plain"), "--device", "cpu", "--llama-server", "./stand-in-server", "--", "-np", "1"])
    assert code == 3
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["argv"] == ["-m", "plain.gguf", "-ngl", "0", "--jinja", "--host", "127.0.0.1", "--port", "8080", "-np", "1"]
    assert not is_running(record["pid"])
    assert {s: signal.getsignal(s) for s in before} == before, "serve puts the signal handlers back"
    assert capsys.readouterr().out == ""


# -- finding llama-server -----------------------------------------------------------------------------------


def test_no_build_stops_a_launch_with_how_to_make_one(tmp_path: Path, gguf_file: FileFn, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "-m", gguf_file("rotated-dense")]) == 5
    no_root = server.NO_ROOT.format(marker="pins.yaml", cwd=tmp_path, variable="ONEBIT_CI_ROOT")
    problem = server.NO_BUILD.format(profile="gfx1151", why=no_root)
    assert capsys.readouterr().err.splitlines()[-1] == cli.ERROR.format(prog=cli.SERVE, problem=problem)


def test_no_manifest_under_the_root(tmp_path: Path, gguf_file: FileFn, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pins.yaml").write_text("")
    assert main(["serve", "-m", gguf_file("plain"), "--device", "cpu"]) == 5
    problem = server.NO_BUILD.format(profile="cpu", why=server.NO_MANIFEST.format(manifest="build/cpu/build.json"))
    assert capsys.readouterr().err.splitlines()[-1] == cli.ERROR.format(prog=cli.SERVE, problem=problem)


def test_root_is_found_upwards_and_from_onebit_ci_root(tmp_path: Path, dry_run: DryRunFn, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "onebit-ci"
    (root / "models").mkdir(parents=True)
    (root / "pins.yaml").write_text("")
    binary = write_stand_in(root / "build" / "vulkan" / "llama-server", tmp_path / "record.json")
    write_manifest(root, "vulkan", binary)
    from tests.support.gguf_files import make

    model = make("plain", root / "models")
    monkeypatch.chdir(root / "models")
    assert dry_run("-m", model).argv[0] == str(binary.resolve())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ONEBIT_CI_ROOT", "onebit-ci")
    assert dry_run("-m", f"onebit-ci/models/{model}").argv[0] == str(binary.resolve())


def test_replaced_binary_is_refused(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    (tmp_path / "pins.yaml").write_text("")
    binary = write_stand_in(tmp_path / "build" / "gfx1151" / "llama-server", tmp_path / "record.json")
    manifest = write_manifest(tmp_path, "gfx1151", binary)
    want = json.loads(manifest.read_text())["binaries"]["llama-server"]["sha256"]
    binary.write_text(binary.read_text() + "# rebuilt since\n")
    got = hashlib.sha256(binary.read_bytes()).hexdigest()
    code, line = serve_error("-m", gguf_file("rotated-dense"))
    assert code == 4
    problem = server.BINARY_REPLACED.format(got=got[:12], want=want[:12], manifest="build/gfx1151/build.json", profile="gfx1151")
    assert line == AT.format(where="build/gfx1151/llama-server", problem=problem)


MANIFEST = "build/cpu/build.json"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", AT.format(where=MANIFEST, problem=server.MANIFEST_NOT_JSON.format(
            error="Expecting property name enclosed in double quotes", line=1, column=2, profile="cpu"))),  # json's own words
        ('{"binaries": {}}', AT.format(where=MANIFEST, problem=server.NO_BINARY_ENTRY.format(binary="llama-server", profile="cpu"))),
        ('{"binaries": {"llama-server": {"path": "bin/llama-server", "sha256": "abc"}}}',
         AT.format(where=MANIFEST, problem=server.NO_BINARY_SHA256.format(binary="llama-server"))),
        ('{"binaries": {"llama-server": {"sha256": "' + "0" * 64 + '"}}}',
         AT.format(where=MANIFEST, problem=server.NO_BINARY_PATH.format(binary="llama-server"))),
        ('{"binaries": {"llama-server": {"path": "bin/llama-server", "sha256": "' + "0" * 64 + '"}}}',
         AT.format(where="build/cpu/bin/llama-server",
                   problem=server.BINARY_MISSING.format(manifest=MANIFEST, path="bin/llama-server", profile="cpu"))),
    ],
)  # fmt: skip
def test_malformed_manifest(text: str, problem: str, tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    (tmp_path / "pins.yaml").write_text("")
    (tmp_path / "build" / "cpu").mkdir(parents=True)
    (tmp_path / "build" / "cpu" / "build.json").write_text(text)
    assert serve_error("-m", gguf_file("plain"), "--device", "cpu")[1] == problem


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("./no-such-server", AT.format(where=FLAG_PATH.format(flag="--llama-server", path="./no-such-server"), problem=NO_SUCH_FILE)),
        (
            "no-such-llama-server-on-path",
            AT.format(where="--llama-server", problem=server.NOT_ON_PATH.format(name="no-such-llama-server-on-path")),
        ),
    ],
)
def test_llama_server_option_must_exist(value: str, problem: str, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    assert serve_error("-m", gguf_file("plain"), "--llama-server", value) == (5, problem)


def test_llama_server_option_must_be_executable(tmp_path: Path, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    (tmp_path / "llama-server").write_text("#!/bin/sh\n")
    assert serve_error("-m", gguf_file("plain"), "--llama-server", "./llama-server") == (
        5,
        AT.format(where=FLAG_PATH.format(flag="--llama-server", path="./llama-server"), problem=server.NOT_EXECUTABLE),
    )


# -- serve ships alone ---------------------------------------------------------------------------------------


def test_serve_runs_without_ci_nox_or_pygit2(tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn) -> None:
    """``python -m serve`` with ci/, nox and pygit2 made unimportable prints the same decision (gguf brings pyyaml)."""
    model = gguf_file("rotated-moe")
    program = (
        "import sys\n"
        "for name in ('ci', 'nox', 'pygit2', 'requests', 'junitparser'):\n"
        "    sys.modules[name] = None\n"
        "import runpy\n"
        "sys.argv = ['serve', 'serve', '-m', sys.argv[1], '--dry-run']\n"
        "runpy.run_module('serve', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, model], cwd=tmp_path, env=launcher_env(), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["argv"] == dry_run("-m", model).argv


def test_a_stale_build_is_refused_and_runs_only_when_allowed(tmp_path: Path, gguf_file: FileFn, dry_run: DryRunFn, serve_error: ErrorFn) -> None:
    binary = write_stand_in(tmp_path / "build" / "gfx1151" / "llama-server", tmp_path / "record.json")
    write_manifest(tmp_path, "gfx1151", binary)
    assert dry_run("-m", gguf_file("rotated-dense")).argv[0] == str(binary.resolve())
    # the patch series moved on since the build: same binary, same sha256, but not what pins.yaml and patches/ say
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "fix.patch").write_text("a patch\n")
    (tmp_path / "patches" / "series").write_text("fix.patch\n")
    code, line = serve_error("-m", gguf_file("rotated-dense"))
    assert code == 4
    current, built = identity.series_digest([("fix.patch", b"a patch\n")]), identity.series_digest([])  # the build had no patches
    moved = identity.SERIES_MOVED.format(current=current[:12], built=built[:12])
    stale = server.STALE.format(profile="gfx1151", what=moved)
    assert line == AT.format(where="build/gfx1151/build.json", problem=server.STALE_REFUSED.format(stale=stale, profile="gfx1151"))
    allowed = dry_run("-m", gguf_file("rotated-dense"), "--allow-stale")
    assert allowed.argv[0] == str(binary.resolve())
    assert cli.STALE_WARNING.format(stale=stale) in allowed.stderr.splitlines()
    # a pin moved on
    (tmp_path / "patches" / "series").write_text("")
    (tmp_path / "pins.yaml").write_text("fork:\n  commit: " + "b" * 40 + "\n")
    code, line = serve_error("-m", gguf_file("rotated-dense"))
    stale = server.STALE.format(profile="gfx1151", what=identity.PIN_MOVED.format(pinned="bbbbbbb", built="aaaaaaa"))
    assert line == AT.format(where="build/gfx1151/build.json", problem=server.STALE_REFUSED.format(stale=stale, profile="gfx1151"))
