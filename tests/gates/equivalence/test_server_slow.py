"""The server context manager against the real CPU llama-server (started directly: the launcher is tested through
the gate in test_gate_slow.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ci.errors import ServerFailed
from ci.gates.equivalence import judge as ej
from ci.gates.equivalence import plan as eq_plan
from ci.gates.serving import llama
from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports
from ci.gates.serving.prompts import Prompt
from ci.gates.tiny.models import TinyModels
from tests.support.binaries import llama_binary
from tests.support.messages import pattern
from tests.support.processes import live_processes_naming

pytestmark = pytest.mark.slow


def direct(models: TinyModels) -> ServerLaunch:
    (port,) = free_ports(1)
    argv = (str(llama_binary("llama-server")), "-m", str(models.target), "-ngl", "0", "-c", "512", "--host", "127.0.0.1", "--port", str(port))
    return ServerLaunch("baseline", argv, "127.0.0.1", port)


def test_an_http_error_is_reported_with_its_body(tiny_models: TinyModels, tmp_path: Path) -> None:
    plan = eq_plan.EquivalencePlan(eq_plan.Leg("baseline", tiny_models.target), eq_plan.Leg("drafter", tiny_models.target), (), Path())
    body = plan.body(Prompt("short", "Q:"), ej.Resume((99_999,), 4))  # a resume with an id past the vocab
    with LlamaServer(direct(tiny_models), tmp_path / "s.log") as server, pytest.raises(ServerFailed) as failed:
        server.completion(body)
    assert pattern(llama.HTTP_ERROR, leg="baseline", path="/completion", status=400).match(failed.value.message)
    assert "Prompt contains invalid tokens" in failed.value.message
    assert server.returncode is not None
    assert server.leftovers() == ()


def test_a_request_timeout_is_reported_and_the_server_reaped(tiny_models: TinyModels, tmp_path: Path) -> None:
    plan = eq_plan.EquivalencePlan(eq_plan.Leg("baseline", tiny_models.target), eq_plan.Leg("drafter", tiny_models.target), (), Path())
    no_answer = llama.NO_ANSWER.format(leg="baseline", path="/completion", seconds=0.001)
    with LlamaServer(direct(tiny_models), tmp_path / "s.log") as server, pytest.raises(ServerFailed, match=re.escape(no_answer)):
        server.completion(plan.body(Prompt("short", "Q:"), ej.Resume((), 400)), timeout=0.001)
    assert server.leftovers() == ()
    assert live_processes_naming(str(tiny_models.target)) == []


def test_stop_is_idempotent_and_reports_the_exit(tiny_models: TinyModels, tmp_path: Path) -> None:
    server = LlamaServer(direct(tiny_models), tmp_path / "s.log")
    assert server.stop() is None  # never started: nothing to do
    with server:
        assert server.processes() == ()  # llama-server is the direct child here: no descendants
    first = server.returncode
    assert first is not None
    assert server.stop() == first
    assert "cleaning up before exit" in server.log_tail()
