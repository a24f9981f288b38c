"""The models a record names are the models its servers ran (issue 43, item 4). The equivalence gate hashed its models
once, as it planned; a drafter renamed over while the gate ran left a record naming a file no server judged. Each
model is hashed again after the run, and a file changed meanwhile makes the verdict an error naming it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ci.gates.equivalence import plan as eq_plan
from ci.gates.equivalence import run as eq
from ci.gates.results import Status
from ci.gates.serving.llama import LlamaServer, ServerLaunch
from ci.gates.tiny.models import TinyModels
from ci.pin.pins import Floors
from tests.support.binaries import llama_binary

pytestmark = pytest.mark.slow


class _SwapsTheDrafter:
    """A server factory whose first answered completion renames another model over the drafter's file."""

    def __init__(self, drafter: Path, other: Path) -> None:
        self.drafter, self.other, self.done = drafter, other, False

    def __call__(self, launch: ServerLaunch, log_path: Path, health_timeout: float) -> LlamaServer:
        factory = self

        class Server(LlamaServer):
            def completion(self, body: Mapping[str, Any], timeout: float = 300.0) -> dict[str, Any]:
                answer = super().completion(body, timeout)
                if not factory.done:
                    factory.done = True
                    os.replace(factory.other, factory.drafter)
                return answer

        return Server(launch, log_path, health_timeout=health_timeout)


def test_a_drafter_renamed_over_while_the_gate_ran_is_an_error_naming_it(tiny_models: TinyModels, tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    target, drafter, other = (models / p.name for p in (tiny_models.target, tiny_models.near_drafter, tiny_models.other_target))
    for src, dst in ((tiny_models.target, target), (tiny_models.near_drafter, drafter), (tiny_models.other_target, other)):
        dst.write_bytes(src.read_bytes())
    plan = eq_plan.plan(
        model=target, drafter=drafter, llama_server=llama_binary("llama-server"), device="cpu", tokens=16, floors=Floors(accepted=1, rejected=1, acceptance=0.0)
    )
    assert plan.identity is not None
    result = eq.run(plan, tmp_path / "logs", _SwapsTheDrafter(drafter, other))
    assert result.status is Status.ERROR, result.summary
    assert eq.MODEL_CHANGED.format(leg="drafter", path=drafter, judged=plan.identity.drafter_sha256[:12], now=eq.sha256_now(drafter)[:12]) in result.problems
