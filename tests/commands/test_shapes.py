"""``python -m ci shape-models``: a set written where asked and described in a line a model; a role or set that is none
is one line, and nothing is written."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from ci.cli import main
from ci.gates.shapes import models


def ci(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_the_reduced_drafter_is_written_and_described(tmp_path: Path) -> None:
    code, out, err = ci("shape-models", "--set", "reduced", "--roles", "drafter", "--out", str(tmp_path))
    assert code == 0, err
    (written,) = (tmp_path / "reduced").glob("*.gguf")
    assert written.name == models.model_files(models.shape_set("reduced"))["drafter"].file
    assert out.splitlines()[-1].startswith(f"{written.name}: ")


def test_a_role_that_is_none_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    code, _, err = ci("shape-models", "--set", "reduced", "--roles", "drafter,critic", "--out", str(tmp_path))
    assert code == 2
    assert err == "onebit-ci: error: " + models.UNKNOWN_ROLE.format(role="critic", known=", ".join(models.ROLES)) + "\n"
    assert not list(tmp_path.rglob("*.gguf"))
