from __future__ import annotations

from dataclasses import dataclass

import pytest

from ci import backend_ops, equivalence, gates, tinymodels
from ci.results import GateResult
from tests.binaries import llama_binary
from tests.build.conftest import build_fork, build_project, make_build_project  # noqa: F401  (the build stage's fixtures, shared)


@dataclass(frozen=True)
class RealGates:
    """Gate results from real runs of the CI tier: the route tests, the CPU test-backend-ops, the CPU llama-server."""

    route: GateResult
    backend_ops: GateResult
    backend_ops_failed: GateResult
    equivalence: GateResult


@pytest.fixture(scope="session")
def real_gates(tmp_path_factory: pytest.TempPathFactory) -> RealGates:
    out = tmp_path_factory.mktemp("gates")
    tbo = llama_binary("test-backend-ops")
    passed = backend_ops.run_gate(tbo, "CPU", {"GATED_DELTA_NET": 36}, None, False, 120, out / "bo-pass")
    failed = backend_ops.run_gate(tbo, "CPU", {"GATED_DELTA_NET": 54}, None, False, 120, out / "bo-fail")
    models = tinymodels.write_tiny_models(out / "models")
    plan = equivalence.plan(model=models.target, drafter=models.drafter, llama_server=llama_binary("llama-server"), tokens=32)
    eq = equivalence.run(plan, out / "eq")
    route = gates.route_gate(out)
    for r in (route, passed, eq):
        assert r.ok, (r.gate, r.summary, r.problems)
    assert not failed.ok
    return RealGates(route, passed, failed, eq)
