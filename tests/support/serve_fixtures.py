"""The fixtures of the launcher's tests (tests/serve and the route tests, tests/route): each case in its own directory
with none of serve's variables set, GGUF files written there, and ``1bit serve`` run in-process."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from serve.cli import main
from tests.support.gguf_files import make
from tests.support.route import ERROR_PREFIX, DryRun


@pytest.fixture(autouse=True)
def _route_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every case runs in its own directory (no pins.yaml above it) with none of serve's variables set."""
    monkeypatch.chdir(tmp_path)
    for var in ("ONEBIT_SERVE_DEVICE", "GGML_W4A4_TENSORS", "ONEBIT_CI_ROOT", "ONEBIT_SERVE_RELEASE"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def gguf_file(tmp_path: Path) -> Callable[[str], str]:
    """``gguf_file("rotated-moe")`` -> ``"rotated-moe.gguf"``, written in the case's directory."""
    return lambda kind: make(kind, tmp_path)


def _with_dry_run(args: tuple[str, ...]) -> list[str]:
    cut = args.index("--") if "--" in args else len(args)
    return ["serve", *args[:cut], "--dry-run", *args[cut:]]


@pytest.fixture
def dry_run(capsys: pytest.CaptureFixture[str]) -> Callable[..., DryRun]:
    """``1bit serve ARGS --dry-run`` in-process; the one JSON object it prints, parsed."""

    def run(*args: str) -> DryRun:
        code = main(_with_dry_run(args))
        out, err = capsys.readouterr()
        assert code == 0, err
        doc: dict[str, Any] = json.loads(out)
        assert set(doc) == {"argv", "env", "notes", "recipes", "gated"}
        assert out.count("\n") == 1, "one JSON object on one line"
        return DryRun(argv=doc["argv"], env=doc["env"], notes=doc["notes"], recipes=doc["recipes"], stderr=err)

    return run


@pytest.fixture
def serve_error(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """``1bit serve ARGS --dry-run`` that must fail: (exit code, the one error line without its prefix)."""

    def run(*args: str) -> tuple[int, str]:
        code = main(_with_dry_run(args))
        out, err = capsys.readouterr()
        assert code != 0
        assert out == "", "nothing on stdout when serve refuses"
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(ERROR_PREFIX), err
        return code, lines[0][len(ERROR_PREFIX) :]

    return run
