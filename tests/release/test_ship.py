from __future__ import annotations

import dataclasses
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ci import cli, schema, words
from ci.commands import ship as ship_command
from ci.compile import cmake, stage
from ci.compile.manifest import Manifest
from ci.gates import registry
from ci.gates.equivalence.gate import committed_prompts_sha256
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.gates.selftest import faults as fault_set
from ci.gates.selftest import run as selftest
from ci.gates.serving.model_sets import GIVEN_MODELS, RELEASE_MODELS, TINY_MODELS
from ci.pin import pins as pins_mod
from ci.release import binding, ledger
from ci.release import ship as release_ship
from ci.release import standings as release_standings
from ci.release import wheel as release_wheel
from tests.support.build import BuildFork, add_fixture_patch, build_cpu, manifest
from tests.support.messages import said
from tests.support.project import Project, Result


def gate(name: str, status: Status, summary: str, problems: tuple[str, ...] = (), n: int = 3) -> GateResult:
    """A gate's result held in memory, as a gate returns it: ship only counts the records."""
    cases = tuple(CaseResult(f"case {i}", Status.PASSED if i < n else Status.FAILED) for i in range(n + (status is Status.FAILED)))
    return GateResult(name, status, summary, cases, problems, case_counts(cases))


class GATES:
    route = gate("route", Status.PASSED, "165/165 route tests passed")
    backend_ops = gate("backend_ops", Status.PASSED, "GATED_DELTA_NET 36/36 on CPU")
    backend_ops_failed = gate("backend_ops", Status.FAILED, "GATED_DELTA_NET 36/54 on CPU", ("GATED_DELTA_NET: 54 expected, 36 ran and passed",))
    # on the models a release is judged on when pins.yaml names none: the tiny generated ones
    equivalence = dataclasses.replace(gate("equivalence", Status.PASSED, "PASSED: 3/3 prompts equal over 32 tokens"), properties=(("models", TINY_MODELS),))


def built(project: Project, *args: str) -> dict[str, Any]:
    r = build_cpu(project, *args)
    assert r.code == 0, r.err
    return manifest(project)


def record(project: Project, m: dict[str, Any], *results: GateResult) -> None:
    """Each result recorded as gpu_tests records it: bound to the build's binaries and to the criteria it judged."""
    pins = pins_mod.load(project.root / "pins.yaml")
    context = binding.context_of(pins, Manifest.from_json(m))
    for r in results:
        if r.gate == "equivalence":
            r = as_run_on(r, m, pins)
        if r.gate == "route" and not dict(r.properties):  # as the gate writes it: the digests its tests started at
            from ci.gates.route.run import route_tests_sha256
            from ci.gates.serving.launcher import launcher_sha256

            r = dataclasses.replace(r, properties=(("launcher_sha256", launcher_sha256()), ("route_tests_sha256", route_tests_sha256())))
        ledger.append(project.root / "build" / "results" / "ledger.jsonl", r, context)


def tiny_properties(directory: Path) -> tuple[tuple[str, str], ...]:
    """What the engine path's record names of the tiny generated models it ran (written in ``directory``): each leg's
    file and the generator's sha256 of it."""
    digests = release_standings.tiny_digests()
    files = {
        "model": "tiny-qwen35-target.gguf", "near.drafter": "tiny-qwen35-near-drafter.gguf", "dflash.drafter": "tiny-qwen35-dflash.gguf",
        "dflash-whole.drafter": "tiny-qwen35-dflash.gguf", "mtp.drafter": "tiny-qwen35-mtp.gguf", "llama.drafter": "tiny-near-drafter.gguf",
    }  # fmt: skip
    return tuple(p for key, name in files.items() for p in ((key, str(directory / name)), (f"{key}_sha256", digests[name])))


def as_run_on(r: GateResult, m: dict[str, Any], pins: pins_mod.Pins) -> GateResult:
    """An equivalence result as the gate writes it on this build: its llama-server's sha256 and pins.yaml's tokens,
    floors and near-tie margin and the committed prompts' sha256, each unless the result names its own; on the tiny
    models, the files it ran and their sha256, unless it names a model digest of its own."""
    config = pins.equivalence
    props = dict(r.properties)
    if props.get("models") == TINY_MODELS and not any(k.endswith(("model_sha256", "drafter_sha256")) for k in props):
        r = dataclasses.replace(r, properties=(*r.properties, *tiny_properties(Path("/build/cpu/tiny-models"))))
    ran = {
        "llama_server_sha256": m["binaries"]["llama-server"]["sha256"],
        "tokens": str(config.tokens),
        "floors": config.floors.describe(),
        "near_tie_nats": f"{config.near_tie_nats:g}",
        "prompts_sha256": committed_prompts_sha256(),
    }
    return dataclasses.replace(r, properties=(*((k, v) for k, v in ran.items() if k not in dict(r.properties)), *r.properties))


def ship(project: Project, *args: str) -> Result:
    return project.ci("ship", "--profile", "cpu", *args)


def row(gate: str, state: str, detail: str, width: int = len("equivalence")) -> str:
    """A line of ship's table: the gate's name padded to the longest one's (route, backend_ops, equivalence)."""
    return release_ship.TABLE_ROW.format(gate=gate.ljust(width), state=state, detail=detail)


def missing_on(models: str, note: str = "") -> str:
    """An equivalence gate's detail with no record on ``models`` that counts."""
    return release_standings.NO_COUNTED_RECORD.format(what=release_standings.ON_MODELS.format(models=models), note=note)


def not_counted_models(models: str, line: int, more: int = 0) -> str:
    """The note on the last record that ran on ``models``, not the release's."""
    and_more = words.AND_MORE.format(count=more) if more else ""
    return release_standings.NOT_COUNTED.format(why=release_standings.OTHER_MODELS.format(models=models), line=line, more=and_more)


def test_no_records_refuses_listing_every_gate(build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = built(build_project)
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))  # on GitHub Actions the table goes to the job summary too
    r = ship(build_project)
    title = ship_command.SUMMARY_TITLE.format(profile="cpu", verdict=ship_command.REFUSED)
    head = release_ship.TABLE_HEAD.format(key=m["key"][:12], profile="cpu", pin=m["pin"]["commit"][:7], patches=m["patches"]["digest"][:12])
    assert summary.read_text().startswith(f"{title}\n\n```\n{head}\n")
    assert summary.read_text().count("MISSING") == 3
    assert r.code == 7
    for gate in ("route", "backend_ops", "equivalence"):
        assert row(gate, "MISSING", release_standings.NO_RECORD) in r.out
    assert r.out.count("MISSING") == 3
    assert release_ship.REFUSED.format(failing=3, total=3, gates="route, backend_ops, equivalence") in r.err
    assert not (build_project.root / "dist").exists()


def test_one_failed_gate_refuses(build_project: Project) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops_failed, GATES.equivalence)
    r = ship(build_project)
    assert r.code == 7
    assert said(release_ship.TABLE_ROW, r.out, gate="backend_ops", state="FAILED")
    assert GATES.backend_ops_failed.problems[0] in r.out  # the gate's problem, as the record holds it
    assert release_ship.REFUSED.format(failing=1, total=3, gates="backend_ops") in r.err


def test_a_later_failure_overrides_an_earlier_pass(build_project: Project) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence, GATES.backend_ops_failed)
    assert ship(build_project).code == 7


def test_records_for_another_key_never_count(build_project: Project) -> None:
    m = built(build_project)
    other = dict(m, key="0" * 64)
    record(build_project, other, GATES.route, GATES.backend_ops, GATES.equivalence)
    r = ship(build_project)
    assert r.code == 7
    assert r.out.count("STALE") == 3
    for line, gate in enumerate(("route", "backend_ops", "equivalence"), 1):
        assert row(gate, "STALE", release_standings.STALE_RECORD.format(verdict="passed", line=line, key="000000000000")) in r.out


def test_a_patch_change_makes_the_build_and_then_the_records_stale(build_project: Project, build_fork: BuildFork) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    assert ship(build_project, "--check").code == 0
    add_fixture_patch(build_project, build_fork, "hello.patch", "tools/server/server.cpp", "llama-server %s", "llama-server says %s")
    r = ship(build_project)
    assert r.code == 4
    stale = {"old": m["key"][:12], "reasons": cmake.KEY_PART_CHANGED.format(part="patches"), "hint": stage.REBUILD.format(profile="cpu")}
    assert said(stage.STALE_BUILD, r.err, profile="cpu", **stale)
    built(build_project)
    r = ship(build_project)
    assert r.code == 7
    assert r.out.count("STALE") == 3


def test_every_gate_passed_ships_with_the_evidence(build_project: Project) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    r = ship(build_project)
    assert r.code == 0, r.err
    dist = build_project.root / "dist"
    wheel = next(dist.glob("onebit_serve-*.whl"))
    sdist = next(dist.glob("onebit_serve-*.tar.gz"))
    release = json.loads(next(dist.glob("onebit_serve-*.release.json")).read_text())
    assert f"+g{m['pin']['commit'][:7]}.b{m['key'][:8]}" in wheel.name
    assert sdist.stat().st_size > 0
    assert release["build"]["key"] == m["key"]
    assert release["pin"]["commit"] == m["pin"]["commit"]
    assert release["patches"]["digest"] == m["patches"]["digest"]
    *records, shipped = ledger.read(build_project.root / "build" / "results" / "ledger.jsonl").records
    assert (shipped.gate, shipped.verdict, shipped.build_key) == ("ship", "passed", m["key"])  # the release, for the next perf gate
    for gate, rec in zip(("route", "backend_ops", "equivalence"), records, strict=True):
        assert release["gates"][gate]["verdict"] == "passed"
        assert release["gates"][gate]["record_sha256"] == rec.sha256
        assert release["gates"][gate]["counts"] == rec.data["counts"]
    with zipfile.ZipFile(wheel) as zf:
        inside = json.loads(zf.read("serve/release.json"))
        names = zf.namelist()
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "1bit = serve.cli:main" in zf.read(entry_points).decode()
    assert inside == release
    assert "serve/config/recipes.json" in names
    assert not any(n.startswith("ci/") for n in names)


def test_a_machine_flag_is_in_the_key_of_every_session(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEBIT_CMAKE_ARGS", "-DFIXTURE_GREETING=machine")
    m = built(build_project)
    assert m["local_flags"] == ["-DFIXTURE_GREETING=machine"]
    assert "-DFIXTURE_GREETING=machine" in m["flags"]
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    r = ship(build_project, "--check")
    assert r.code == 0, r.err  # the key ship computes has the machine's flag too: not stale
    (build_project.root / "cmake-args.local").write_text("# this box\n-DFIXTURE_GREETING=machine\n")
    monkeypatch.delenv("ONEBIT_CMAKE_ARGS")
    assert ship(build_project, "--check").code == 0  # the same flag from the git-ignored file
    r = ship(build_project)
    assert r.code == 0, r.err
    release = json.loads(next((build_project.root / "dist").glob("onebit_serve-*.release.json")).read_text())
    assert release["build"]["local_flags"] == ["-DFIXTURE_GREETING=machine"]


def test_a_one_off_flag_is_named_when_a_later_session_refuses_the_build(build_project: Project) -> None:
    m = built(build_project, "-DFIXTURE_GREETING=once")
    assert m["one_off_flags"] == ["-DFIXTURE_GREETING=once"]
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    r = ship(build_project, "--check")
    assert r.code == 4
    refused = stage.ONE_OFF_MISSING.format(profile="cpu", flags="-DFIXTURE_GREETING=once", hint=stage.REBUILD.format(profile="cpu"))
    assert refused in r.err
    r = build_project.ci("gpu-tests", "--profile", "cpu")
    assert r.code == 4
    assert refused in r.err


def test_a_forged_last_record_stops_ship(build_project: Project) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.equivalence, GATES.backend_ops_failed)
    path = build_project.root / "build" / "results" / "ledger.jsonl"
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    last["verdict"], last["counts"] = "passed", {**last["counts"], "failed": 0}  # its counts forged too: a consistent record
    path.write_text("\n".join([*lines[:-1], json.dumps(last, sort_keys=True)]) + "\n")
    r = ship(build_project)
    assert r.code == 2
    assert r.err == cli.ERROR.format(message=ledger.HEAD_MISMATCH.format(path=path)) + "\n"
    assert not (build_project.root / "dist").exists()


RELEASE = {"model": "a" * 64, "drafter": "b" * 64}
RELEASE_PINS = f"""
equivalence:
  model: {{path: models/Qwen3.8-27B-Q4_0-H32.gguf, sha256: {RELEASE["model"]}}}
  drafter: {{path: models/Qwen3.8-27B-DFlash2-q8_0.gguf, sha256: {RELEASE["drafter"]}}}
"""


def equivalence_on(models: str, model_sha: str, drafter_sha: str) -> GateResult:
    props = (("models", models), ("model_sha256", model_sha), ("drafter_sha256", drafter_sha))
    return dataclasses.replace(GATES.equivalence, properties=props)


def test_with_release_models_named_a_tiny_model_pass_does_not_ship(make_build_project: Callable[..., Project]) -> None:
    project = make_build_project(RELEASE_PINS)
    m = built(project)
    record(project, m, GATES.route, GATES.backend_ops, equivalence_on(TINY_MODELS, "c" * 64, "d" * 64))
    r = ship(project)
    assert r.code == 7
    assert row("equivalence", "MISSING", missing_on(RELEASE_MODELS, not_counted_models(TINY_MODELS, 3))) in r.out
    record(project, m, equivalence_on(RELEASE_MODELS, "e" * 64, RELEASE["drafter"]))  # another file than the release's
    assert not_counted_models(RELEASE_MODELS, 4, more=1) in ship(project, "--check").out
    record(project, m, equivalence_on(RELEASE_MODELS, RELEASE["model"], RELEASE["drafter"]))
    r = ship(project)
    assert r.code == 0, r.out + r.err
    assert release_standings.MODELS_TAG.format(models=RELEASE_MODELS) in r.out
    release = json.loads(next((project.root / "dist").glob("onebit_serve-*.release.json")).read_text())
    assert release["evidence"] == RELEASE_MODELS
    assert release["gates"]["equivalence"]["properties"]["model_sha256"] == RELEASE["model"]


def test_without_release_models_the_table_says_what_the_evidence_covers(build_project: Project) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)  # the generator's files, as the gate names them
    r = ship(build_project, "--check")
    assert r.code == 0, r.err
    assert release_standings.MODELS_TAG.format(models=TINY_MODELS) in r.out


def test_a_run_on_other_models_is_recorded_but_never_counted(build_project: Project) -> None:
    """A pass on hand-picked models (gpu_tests --model M --drafter D) once replaced the run on the models the release
    is judged on, with a drafter that almost never drafted right (issue 20)."""
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, equivalence_on(GIVEN_MODELS, "c" * 64, "d" * 64))
    r = ship(build_project, "--check")
    assert r.code == 7
    assert row("equivalence", "MISSING", missing_on(TINY_MODELS, not_counted_models(GIVEN_MODELS, 3))) in r.out
    record(build_project, m, GATES.equivalence, equivalence_on(GIVEN_MODELS, "c" * 64, "d" * 64))  # a later run on given models changes nothing
    r = ship(build_project, "--check")
    assert r.code == 0, r.out + r.err
    assert release_standings.MODELS_TAG.format(models=TINY_MODELS) + not_counted_models(GIVEN_MODELS, 5, more=1) in r.out


def test_pins_yaml_can_require_the_gate_selftest(make_build_project: Callable[..., Project]) -> None:
    project = make_build_project("release:\n  require: [gate_selftest]\n")
    m = built(project)
    record(project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    r = ship(project, "--check")
    assert r.code == 7
    assert row("gate_selftest", "MISSING", release_standings.NO_RECORD, width=len("gate_selftest")) in r.out
    committed = fault_set.faults_sha256([f for f in selftest.load_faults() if "cpu" in f.profiles])  # what the session records
    passed = gate("gate_selftest", Status.PASSED, "PASSED: 4/4 faults caught by their gates, 1/1 benign edits passed every gate")
    record(project, m, dataclasses.replace(passed, properties=(("faults_sha256", committed),)))
    assert ship(project, "--check").code == 0
    # a gate ship does not know is refused in pins.yaml itself
    project.pins.write_text(project.pins.read_text().replace("require: [gate_selftest]", "require: [gate_selftst]"))
    r = ship(project, "--check")
    assert r.code == 2
    suggestion = schema.DID_YOU_MEAN.format(choice="gate_selftest")
    refused = registry.NOT_REQUIRABLE.format(file="pins.yaml", index=0, gate="gate_selftst", suggestion=suggestion, known=", ".join(registry.requirable()))
    assert cli.ERROR.format(message=refused) in r.err


def test_the_release_version_keeps_a_key_or_pin_of_digits_with_a_leading_zero() -> None:
    """The main job's slow test failed once: its build key began 01281189, and the wheel's name said 1281189."""
    from packaging.version import Version

    version = release_wheel.release_version("0.1.0", "0086012" + "0" * 33, "01281189" + "f" * 56)
    assert str(Version(version)) == version == "0.1.0+g0086012.b01281189"
