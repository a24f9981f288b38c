"""The route gate runs every route test as the checkout says: pytest's environment options do not reach it, and a
skipped test fails it (a hostile pass recorded 'passed: 0/180' with every test skipped, and 5/5 with -k)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.gates import route
from ci.gates.results import Status
from tests.support.messages import said


def source_with(tmp_path: Path, tests: str) -> Path:
    """A checkout holding only tests/serve/test_it.py: what the gate runs, without the real suite's seconds."""
    (tmp_path / "src" / "tests" / "serve").mkdir(parents=True)
    (tmp_path / "src" / "tests" / "serve" / "test_it.py").write_text(tests)
    (tmp_path / "out").mkdir()
    return tmp_path / "src"


TWO = "def test_one() -> None:\n    assert 1\n\n\ndef test_two() -> None:\n    assert 2\n"


def test_pytest_environment_options_do_not_reach_the_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = source_with(tmp_path, TWO)
    (tmp_path / "skipall.py").write_text(
        "import pytest\n\ndef pytest_collection_modifyitems(items):\n    for i in items:\n        i.add_marker(pytest.mark.skip(reason='x'))\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PYTEST_PLUGINS", "skipall")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-k test_one")
    result = route.route_gate(tmp_path / "out", source)
    assert (result.status, result.summary) == (Status.PASSED, "2/2 route tests passed")


def test_a_skipped_route_test_fails_the_gate(tmp_path: Path) -> None:
    source = source_with(tmp_path, TWO + "\n\n@__import__('pytest').mark.skip(reason='not here')\ndef test_three() -> None:\n    pass\n")
    result = route.route_gate(tmp_path / "out", source)
    assert result.status is Status.FAILED
    assert said(route.SKIPPED, result.problems[-1], count=1)
    assert "test_three: not here" in result.problems[-1]
