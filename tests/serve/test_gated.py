"""The launcher knows what was gated (issue 24): the llama-server it is about to run against the release's gated
sha256 (release.json, as ship writes it into the wheel; here through ONEBIT_SERVE_RELEASE, a stand-in for the wheel's
own copy). An upstream build given with --llama-server is a warning, a refusal under --require-gated."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from serve import cli, gated
from serve.errors import AT
from tests.support.route import DryRun


def binary(path: Path, text: str) -> Path:
    path.write_text(f"#!/bin/sh\necho {text}\n")
    path.chmod(0o755)
    return path


def release(path: Path, sha: str) -> Path:
    path.write_text(json.dumps({"schema": 1, "build": {"key": "k" * 64, "binaries": {"llama-server": sha}}}))
    return path


@pytest.fixture
def gated_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    server = binary(tmp_path / "llama-server", "gated")
    monkeypatch.setenv("ONEBIT_SERVE_RELEASE", str(release(tmp_path / "release.json", hashlib.sha256(server.read_bytes()).hexdigest())))
    return server


def test_the_gated_llama_server_is_named_gated(
    dry_run: Callable[..., DryRun], gguf_file: Callable[[str], str], gated_server: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = dry_run("-m", gguf_file("plain"), "--llama-server", str(gated_server), "--require-gated")
    assert "warning" not in run.stderr


def test_an_upstream_llama_server_is_a_warning_and_dry_run_says_so(
    gguf_file: Callable[[str], str], gated_server: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from serve.cli import main

    upstream = binary(tmp_path / "upstream-llama-server", "upstream")
    assert main(["serve", "-m", gguf_file("plain"), "--llama-server", str(upstream), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["gated"]["state"] == "not gated"
    sha = hashlib.sha256(upstream.read_bytes()).hexdigest()
    warnings = [ln for ln in err.splitlines() if "warning" in ln]
    want = hashlib.sha256(gated_server.read_bytes()).hexdigest()
    detail = gated.NOT_GATED.format(program=upstream, got=sha[:12], want=want[:12], release="k" * 12)
    assert warnings == [cli.NOT_GATED_WARNING.format(detail=detail)]
    assert main(["serve", "-m", gguf_file("plain"), "--llama-server", str(gated_server), "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["gated"]["state"] == "gated"


def test_require_gated_refuses_an_upstream_llama_server(
    serve_error: Callable[..., tuple[int, str]], gguf_file: Callable[[str], str], gated_server: Path, tmp_path: Path
) -> None:
    upstream = binary(tmp_path / "upstream-llama-server", "upstream")
    code, line = serve_error("-m", gguf_file("plain"), "--llama-server", str(upstream), "--require-gated")
    assert code == 4
    got, want = (hashlib.sha256(path.read_bytes()).hexdigest()[:12] for path in (upstream, gated_server))
    detail = gated.NOT_GATED.format(program=upstream, got=got, want=want, release="k" * 12)
    assert line == AT.format(where="--require-gated", problem=cli.NOT_GATED_REFUSED.format(detail=detail))


def test_require_gated_without_a_release_refuses(
    serve_error: Callable[..., tuple[int, str]], gguf_file: Callable[[str], str], tmp_path: Path
) -> None:
    code, line = serve_error("-m", gguf_file("plain"), "--llama-server", str(binary(tmp_path / "llama-server", "x")), "--require-gated")
    assert code == 4
    problem = cli.NO_RELEASE_REFUSED.format(detail=gated.NO_RELEASE, variable="ONEBIT_SERVE_RELEASE")
    assert line == AT.format(where="--require-gated", problem=problem)


def test_a_forged_release_json_is_one_line(
    serve_error: Callable[..., tuple[int, str]], gguf_file: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "release.json"
    bad.write_text('{"build": {"binaries": {"llama-server": "not a sha"}}}')
    monkeypatch.setenv("ONEBIT_SERVE_RELEASE", str(bad))
    code, line = serve_error("-m", gguf_file("plain"), "--llama-server", str(binary(tmp_path / "llama-server", "x")))
    assert code == 2
    assert line == AT.format(where=gated.GIVEN_RELEASE.format(variable="ONEBIT_SERVE_RELEASE", path=bad), problem=gated.NOT_A_SHA256)
