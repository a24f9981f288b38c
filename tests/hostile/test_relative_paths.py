"""A path the user gives relative to where they run the command still names that file once a child runs elsewhere:
the programs a gate starts run in a folder of their own, or in the checkout (the route gate's pytest), not in the
caller's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ci.gates.equivalence import plan as eq_plan
from ci.gates.results import Status
from ci.gates.route import run as route
from ci.gates.tiny.models import TinyModels


def test_the_equivalence_legs_name_a_relative_model_and_drafter_from_the_callers_folder(
    tiny_models: TinyModels, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``nox -s equivalence -- --model target.gguf --drafter drafter.gguf`` in the models' folder: the legs named the
    files as typed (``-m target.gguf``), which a launcher started anywhere but the caller's folder (a fresh empty one,
    as the command layer starts programs) could not find."""
    caller = tmp_path / "caller"
    caller.mkdir()
    shutil.copy(tiny_models.target, caller / "target.gguf")
    shutil.copy(tiny_models.drafter, caller / "drafter.gguf")
    monkeypatch.chdir(caller)
    plan = eq_plan.plan(model=Path("target.gguf"), drafter=Path("drafter.gguf"), llama_server=Path("/usr/bin/llama-server"), device="cpu")
    base = plan.launch(plan.baseline, 8001).argv
    assert base[base.index("-m", base.index("serve")) + 1] == str(caller / "target.gguf")
    drafted = plan.launch(plan.drafter, 8002).argv
    assert drafted[drafted.index("-md") + 1] == str(caller / "drafter.gguf")
    assert plan.drafter_model == caller / "drafter.gguf"


def test_the_route_gate_writes_its_results_where_the_caller_named_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The route gate's pytest runs in the checkout: a relative results folder was read there, the JUnit was written
    into the checkout, and the gate said it ran no test."""
    checkout = tmp_path / "checkout"
    for folder in route.TEST_FOLDERS:
        (checkout / folder).mkdir(parents=True)
        (checkout / folder / f"test_{Path(folder).name}.py").write_text("def test_one() -> None:\n    pass\n")
    (checkout / route.PROJECT_CONFIG).write_text('[tool.pytest.ini_options]\naddopts = ["-ra"]\n')
    caller = tmp_path / "caller"
    caller.mkdir()
    monkeypatch.chdir(caller)
    result = route.route_gate(Path("results"), source=checkout)
    assert (result.status, result.summary) == (Status.PASSED, "2/2 route tests passed"), result.problems
    assert (caller / "results" / "route.pytest.junit.xml").is_file()
    assert not (checkout / "results").exists()
