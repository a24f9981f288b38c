"""One line, the right line: messages name the file and the line a person must look at."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
from pathlib import Path

import pytest

from ci import cli, git, schema
from ci.errors import ConfigError, ToolchainError
from ci.pin.pins import parse
from ci.release.wheel import NO_PYPA, _require_pypa_build
from ci.source import series
from ci.source.series import load_series
from tests.support.fixtures import MakePatch
from tests.support.messages import pattern
from tests.support.project import DELTA_AT_C1, Project, pins_text

FIX = {"ggml/src/delta.c": DELTA_AT_C1.replace("x + 1;", "x + 100;")}


def test_a_yaml_error_names_the_line_it_is_on() -> None:
    lines = pins_text("a" * 40).splitlines(keepends=True)
    n = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("date:"))
    lines[n] = '  date: "2026-09-28\n'  # a quote opened on this line, never closed
    with pytest.raises(ConfigError) as exc:
        parse("".join(lines), Path("pins.yaml"))
    where = schema.YAML_AT_LINE.format(line=n + 1)
    # PyYAML's own words after it
    assert exc.value.message.startswith(schema.NOT_YAML.format(file="pins.yaml", where=where, problem="while scanning a quoted scalar"))


def test_a_key_given_twice_names_both_lines() -> None:
    text = pins_text("a" * 40).replace("  branch: main\n", "  branch: main\n  branch: dev\n")
    twice = schema.AT_LINE.format(file="pins.yaml", line=5, problem=schema.DUPLICATE_KEY.format(key="branch", line=5, first=4))
    with pytest.raises(ConfigError, match="^" + re.escape(twice)):
        parse(text, Path("pins.yaml"))


def test_a_bad_hunk_names_the_line_of_the_patch_file(project: Project, add_patch: MakePatch) -> None:
    add_patch("fix.patch", FIX)
    path = project.root / "patches" / "fix.patch"
    lines = path.read_text().splitlines(keepends=True)
    n = next(i for i, ln in enumerate(lines) if ln.startswith("@@ "))
    lines[n] = "@@ -1,x +1 @@\n"
    path.write_text("".join(lines))
    with pytest.raises(ConfigError) as exc:
        load_series(project.root / "patches")
    # the diff parser's own words (unidiff) in the parentheses
    assert exc.value.message == series.DIFF_UNPARSABLE_AT.format(patch="patches/fix.patch", line=n + 1, error="invalid patch hunk header")


def test_a_series_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    d = tmp_path / "patches"
    d.mkdir()
    (d / "series").write_bytes(b"# order\nfix\xff.patch\n")
    with pytest.raises(ConfigError, match="^" + re.escape(series.SERIES_NOT_UTF8.format(series="patches/series", line=2, byte=0xFF))):
        load_series(d)


def test_a_submodule_index_held_by_another_git_is_one_line(project: Project, add_patch: MakePatch) -> None:
    assert project.ci("patches", "--remote", str(project.fork.path)).code == 0
    lock = project.root / ".git" / "modules" / "third_party" / "llama.cpp-rocmfpx" / "index.lock"
    lock.write_text("")
    add_patch("fix.patch", FIX)
    for args in (("patches",), ("bump-pin", project.fork.c2[:8], "--remote", str(project.fork.path))):
        before = project.state()
        r = project.ci(*args)
        assert r.code == 3, r.err
        assert pattern(cli.ERROR.format(message=git.LOCKED), lock=lock).match(r.err), r.err
        assert r.err.count("\n") == 1
        assert project.state() == before
    lock.unlink()
    assert project.ci("patches").code == 0


def test_ship_without_pypa_build_says_what_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A stand-in for a Python without pypa's build: find_spec answers as it does where only the project's own
    build/ directory (a namespace, no __main__) is importable as "build"."""
    real = importlib.util.find_spec
    (tmp_path / "build").mkdir()
    shadow = importlib.machinery.PathFinder.find_spec("build", [str(tmp_path)])
    assert shadow is not None
    assert shadow.origin is None  # what `python -m build` then finds: a namespace package
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: shadow if name == "build" else real(name, *a))
    with pytest.raises(ToolchainError, match=re.escape(NO_PYPA.format(package="build"))):
        _require_pypa_build()

