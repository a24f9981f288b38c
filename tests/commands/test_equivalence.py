"""``nox -s equivalence`` without ``--llama-server``: the current build of the profile runs, as the README shows it,
or one line says why it cannot (it had looked for llama-server on PATH)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ci import defaults
from ci.commands import bench as bench_command
from ci.commands import equivalence as equivalence_command
from ci.compile import stage
from ci.errors import Refused
from ci.gates.equivalence import plan as eq_plan
from ci.gates.equivalence import run as eq_run
from ci.gates.results import GateResult, Status
from ci.gates.tiny.models import TinyModels
from tests.support.build import build_cpu, manifest
from tests.support.project import Project


def arguments(root: Path, models: TinyModels, **kw: object) -> argparse.Namespace:
    """The equivalence command's arguments as the README's ``--model M --drafter D`` gives them, no --llama-server."""
    base: dict[str, object] = {
        "root": str(root), "model": str(models.target), "drafter": str(models.near_drafter), "llama_server": None, "profile": None,
        "spec_type": "draft-simple", "prompts": None, "tokens": defaults.TOKENS, "near_tie": defaults.NEAR_TIE, "device": None,
        "ctx_size": defaults.CONTEXT, "build_key": "", "out": None,
    }  # fmt: skip
    return argparse.Namespace(**(base | kw))


def test_without_llama_server_the_current_build_of_the_profile_runs(
    build_project: Project, tiny_models: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert build_cpu(build_project).code == 0
    planned: list[eq_plan.EquivalencePlan] = []

    def run(plan: eq_plan.EquivalencePlan, logs: Path) -> GateResult:
        planned.append(plan)
        return GateResult(eq_run.GATE, Status.PASSED, "PASSED: stand-in")

    monkeypatch.setattr(eq_run, "run", run)
    monkeypatch.setenv("ONEBIT_PROFILE", "cpu")  # the job's profile, as the main job takes it
    assert equivalence_command.main(arguments(build_project.root, tiny_models)) == 0
    (plan,) = planned
    built = manifest(build_project)
    assert plan.llama_server == build_project.root / "build" / "cpu" / built["binaries"]["llama-server"]["path"]
    assert (plan.build_key, plan.device) == (built["key"], "cpu")
    assert plan.identity is not None
    assert plan.identity.llama_server_sha256 == built["binaries"]["llama-server"]["sha256"]
    assert (build_project.root / "build" / "gates" / "equivalence.json").is_file()


def test_without_llama_server_and_without_a_build_it_is_one_line_naming_both_ways_out(
    build_project: Project, tiny_models: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ONEBIT_PROFILE", raising=False)
    with pytest.raises(Refused) as exc:
        equivalence_command.main(arguments(build_project.root, tiny_models, profile="cpu"))
    no_build = stage.NO_BUILD.format(profile="cpu", manifest="build/cpu/build.json", hint=stage.REBUILD.format(profile="cpu"))
    assert exc.value.message == bench_command.NO_CURRENT_BUILD.format(command="equivalence", profile="cpu", why=no_build)
    assert "\n" not in exc.value.message
