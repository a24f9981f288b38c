"""Ship re-proves what it ships (issue 24): the campaign's forgeries, each of which wrote dist/ before."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from ci import defaults
from ci.compile import cmake, stage
from ci.compile.manifest import DIFFERS, Artifact, Manifest, stat_stamp
from ci.files import sha256_cached
from ci.gates.archs import judge as archs_judge
from ci.gates.archs import run as archs
from ci.gates.perf import judge as perf
from ci.gates.perf.gate import ENOUGH_ROUNDS
from ci.gates.results import GateResult, Status
from ci.gates.selftest import faults as fault_set
from ci.gates.selftest import run as selftest
from ci.gates.serving import launcher as launcher_files
from ci.gates.serving.model_sets import TINY_MODELS
from ci.pin import pins as pins_mod
from ci.release import binding
from ci.release import ship as release_ship
from ci.release import standings as release_standings
from tests.release.test_ship import GATES, built, record, ship
from tests.support.messages import said
from tests.support.project import Project

SELFTEST_PINS = """
release:
  require: [gate_selftest]
"""


def build_json(project: Project) -> Path:
    return project.root / "build" / "cpu" / "build.json"


def test_a_swapped_llama_server_with_its_sha256_rewritten_in_build_json_does_not_ship(build_project: Project) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    binary = build_project.root / "build" / "cpu" / m["binaries"]["llama-server"]["path"]
    other = build_project.root / "build" / "cpu" / m["binaries"]["test-backend-ops"]["path"]
    shutil.copy2(other, binary)  # a binary no gate judged
    st = os.stat(binary)
    data = json.loads(build_json(build_project).read_text())
    data["binaries"]["llama-server"]["sha256"] = hashlib.sha256(binary.read_bytes()).hexdigest()
    data["binaries"]["llama-server"]["stat"] = list(stat_stamp(st))
    build_json(build_project).write_text(json.dumps(data, indent=2) + "\n")
    r = ship(build_project)
    assert r.code == 7, r.out
    assert r.out.count("MISSING") == 3
    other = binding.OTHER_BINARIES.format(recorded=Manifest.from_json(m).digest[:12], current=Manifest.from_json(data).digest[:12])
    assert said(release_standings.NOT_COUNTED, r.out, why=other)
    assert not (build_project.root / "dist").exists()


def test_a_binary_edited_in_place_with_size_inode_and_mtime_put_back_does_not_ship(build_project: Project) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    binary = build_project.root / "build" / "cpu" / m["binaries"]["llama-server"]["path"]
    before = os.stat(binary)
    data = bytearray(binary.read_bytes())
    at = data.index(b"llama-server")
    data[at : at + 12] = b"llama-sErver"
    with binary.open("r+b") as fh:  # the same inode, the same size
        fh.write(data)
    os.utime(binary, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(binary)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    r = ship(build_project)
    assert r.code == 4, r.out
    wrong = cmake.ARTIFACT_WRONG.format(name="llama-server", problem=DIFFERS)
    stale = stage.STALE_BUILD.format(profile="cpu", old=m["key"][:12], key=m["key"][:12], reasons=wrong, hint=stage.REBUILD.format(profile="cpu"))
    assert stale in r.err
    assert not (build_project.root / "dist").exists()


def test_the_stat_caches_compare_ctime(tmp_path: Path, monkeypatch: object) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 60)
    art = Artifact.of(tmp_path, f)
    first = sha256_cached(f)
    before = os.stat(f)
    with f.open("r+b") as fh:
        fh.seek(10)
        fh.write(b"\1")
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert art.check(tmp_path) == DIFFERS
    assert sha256_cached(f) != first
    assert sha256_cached(f) == hashlib.sha256(f.read_bytes()).hexdigest()


def test_expected_counts_raised_after_gating_do_not_count(build_project: Project) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    assert ship(build_project, "--check").code == 0
    pins = build_project.root / "pins.yaml"
    pins.write_text(pins.read_text().replace("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 60"))
    r = ship(build_project, "--check")
    assert r.code == 7
    assert said(release_ship.TABLE_ROW, r.out, gate="backend_ops", state="MISSING")
    expected = binding.CRITERION_CHANGED.format(criterion="expected", judged="{'GATED_DELTA_NET': 54}", current="{'GATED_DELTA_NET': 60}")
    assert release_standings.NOT_COUNTED.format(why=binding.OTHER_CRITERIA.format(changes=expected), line=2, more="") in r.out


def test_an_equivalence_run_shorter_than_pins_yaml_does_not_count(build_project: Project) -> None:
    m = built(build_project)
    short = dataclasses.replace(GATES.equivalence, properties=(*GATES.equivalence.properties, ("tokens", "4")))
    record(build_project, m, GATES.route, GATES.backend_ops, short)
    r = ship(build_project, "--check")
    assert r.code == 7
    assert said(release_ship.TABLE_ROW, r.out, gate="equivalence", state="MISSING")
    assert binding.OTHER_CRITERIA.format(changes=binding.CRITERION_CHANGED.format(criterion="tokens", judged="4", current="256")) in r.out


def selftest_result(faults: list[fault_set.Fault]) -> GateResult:
    return GateResult(
        "gate_selftest",
        Status.PASSED,
        f"PASSED: {len(faults)}/{len(faults)} faults",
        properties=(("faults_sha256", fault_set.faults_sha256(faults)),),
    )


def test_a_selftest_on_a_one_fault_file_does_not_replace_the_committed_faults_failure(make_build_project: Callable[..., Project]) -> None:
    project = make_build_project(SELFTEST_PINS)
    m = built(project)
    committed = [f for f in selftest.load_faults() if "cpu" in f.profiles]
    failed = dataclasses.replace(selftest_result(committed), status=Status.FAILED, summary="FAILED: 1/2 faults caught")
    record(project, m, GATES.route, GATES.backend_ops, GATES.equivalence, failed)
    mine = tmpfile = project.root / "one-fault.yaml"
    tmpfile.write_text("faults: []\n")
    record(project, m, selftest_result(committed[:1]))  # the user's file: one fault, the one that is caught
    r = ship(project, "--check")
    assert mine.exists()
    assert r.code == 7
    assert said(release_ship.TABLE_ROW, r.out, gate="gate_selftest", state="FAILED")
    judged, now = (fault_set.faults_sha256(faults) for faults in (committed[:1], committed))  # each shown as its first 57 characters and ...
    faults = binding.CRITERION_CHANGED.format(criterion="faults_sha256", judged=f"{judged[:57]}...", current=f"{now[:57]}...")
    assert release_standings.NOT_COUNTED.format(why=binding.OTHER_CRITERIA.format(changes=faults), line=5, more="") in r.out
    record(project, m, selftest_result(committed))
    assert ship(project, "--check").code == 0


ARCHS_ROW = archs.GATE.ljust(len("equivalence"))  # ship's table pads each name to the longest one's
ARCHS_PINS = """
release:
  require: [archs]
"""


def archs_result(judged: str, status: Status = Status.PASSED, seed: str = str(archs.SEED)) -> GateResult:
    """An archs result as archs.run_gate records it: the architectures it ran, its seed and its threshold."""
    props = (("archs", judged), ("seed", seed), ("threshold", f"{archs_judge.THRESHOLD:g}"))
    return GateResult(archs.GATE, status, f"{status.value.upper()}: archs {judged}", properties=props)


def test_an_archs_run_on_fewer_architectures_than_pins_yaml_does_not_count(make_build_project: Callable[..., Project]) -> None:
    """The campaign's forgery: archs run while pins.yaml listed llama alone, pins.yaml put back, ship wrote dist/."""
    project = make_build_project(ARCHS_PINS)
    m = built(project)
    listed = ",".join(pins_mod.load(project.root / "pins.yaml").archs)
    record(project, m, GATES.route, GATES.backend_ops, GATES.equivalence, archs_result("llama"))
    r = ship(project)
    assert r.code == 7, r.out
    assert said(release_ship.TABLE_ROW, r.out, gate=ARCHS_ROW, state="MISSING")
    changed = binding.CRITERION_CHANGED.format(criterion="archs", judged="llama", current=listed)
    assert release_standings.NOT_COUNTED.format(why=binding.OTHER_CRITERIA.format(changes=changed), line=4, more="") in r.out
    assert not (project.root / "dist").exists()


def test_a_newer_archs_pass_on_fewer_architectures_does_not_hide_the_listed_ones_failure(make_build_project: Callable[..., Project]) -> None:
    project = make_build_project(ARCHS_PINS)
    m = built(project)
    listed = ",".join(pins_mod.load(project.root / "pins.yaml").archs)
    record(project, m, GATES.route, GATES.backend_ops, GATES.equivalence, archs_result(listed, Status.FAILED), archs_result("llama"))
    r = ship(project, "--check")
    assert r.code == 7, r.out
    assert said(release_ship.TABLE_ROW, r.out, gate=ARCHS_ROW, state="FAILED")
    record(project, m, archs_result(listed, seed="7"))
    r = ship(project, "--check")
    assert r.code == 7, r.out  # another seed is another run than the one the criteria name
    assert said(release_ship.TABLE_ROW, r.out, gate=ARCHS_ROW, state="FAILED")
    assert binding.CRITERION_CHANGED.format(criterion="seed", judged="7", current=str(archs.SEED)) in r.out
    record(project, m, archs_result(listed))
    assert ship(project, "--check").code == 0


def test_an_equivalence_run_with_another_spec_type_than_pins_yaml_does_not_count(build_project: Project) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    assert ship(build_project, "--check").code == 0
    pins = build_project.root / "pins.yaml"
    pins.write_text(pins.read_text() + "equivalence:\n  spec_type: draft-eagle3\n")
    r = ship(build_project, "--check")
    assert r.code == 7, r.out
    assert said(release_ship.TABLE_ROW, r.out, gate="equivalence", state="MISSING")
    changed = binding.CRITERION_CHANGED.format(criterion="spec_type", judged="the gate's default", current="draft-eagle3")
    assert binding.OTHER_CRITERIA.format(changes=changed) in r.out


def test_a_launcher_edited_after_the_gates_ran_does_not_ship(build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The route tests judged one launcher; ship puts whatever serve/ holds at ship time in the wheel. Before, a
    launcher edited after gpu_tests shipped on the route and equivalence records of the one before."""
    launcher = tmp_path / "serve"
    shutil.copytree(launcher_files.launcher_dir(), launcher, ignore=shutil.ignore_patterns(*launcher_files.LAUNCHER_SKIPS))
    monkeypatch.setattr(launcher_files, "launcher_dir", lambda: launcher)
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    judged = launcher_files.launcher_sha256()
    assert ship(build_project, "--check").code == 0
    with (launcher / "route.py").open("a") as f:
        f.write("\nDEVICE_CHOICES = ()  # edited after the gates ran\n")
    r = ship(build_project)
    assert r.code == 7, r.out
    for gate in ("route", "equivalence"):
        assert said(release_ship.TABLE_ROW, r.out, gate=gate.ljust(len("equivalence")), state="MISSING")
    now = launcher_files.launcher_sha256()  # each shown as its first 57 characters and ...
    changed = binding.CRITERION_CHANGED.format(criterion="launcher_sha256", judged=f"{judged[:57]}...", current=f"{now[:57]}...")
    assert binding.OTHER_CRITERIA.format(changes=changed) in r.out
    assert not (build_project.root / "dist").exists()


PERF_PINS = """\
  perf:
    tiny:
      - check: "tokens_per_step(draft, code) >= 3.5"
        measured: "4.655 on the CPU (a test's pins)"
"""


def perf_result(rounds: str) -> GateResult:
    """A perf pass as perf_run records it: the models, and how many rounds it measured."""
    props = (("models", TINY_MODELS), ("rounds", rounds))
    return GateResult(perf.GATE, Status.PASSED, "PASSED: 1/1 checks hold", properties=props)


def test_a_perf_run_of_fewer_rounds_than_the_default_does_not_count(make_build_project: Callable[..., Project]) -> None:
    """One round gives an interval of width 0, never inconclusive: --rounds 1 shipped (a hostile pass)."""
    project = make_build_project(PERF_PINS)
    m = built(project)
    record(project, m, GATES.route, GATES.backend_ops, GATES.equivalence, perf_result("1"))
    r = ship(project, "--check")
    assert r.code == 7, r.out
    assert said(release_ship.TABLE_ROW, r.out, gate="perf".ljust(len("equivalence")), state="MISSING")
    enough = ENOUGH_ROUNDS.format(rounds=defaults.PERF_ROUNDS)
    assert binding.OTHER_CRITERIA.format(changes=binding.CRITERION_CHANGED.format(criterion="rounds", judged="1", current=enough)) in r.out
    record(project, m, perf_result(str(2 * defaults.PERF_ROUNDS)))  # more rounds than the default: counts
    assert ship(project, "--check").code == 0


def test_a_fault_set_that_differs_only_in_missed_by_or_fixes_is_another_fault_set() -> None:
    """A user's faults file with the missed_by gates dropped (never run) or fixes set (judged where equivalence fails
    the unplanted build) had the committed set's digest, so its self-test counted for ship (a hostile pass)."""
    committed = [f for f in selftest.load_faults() if "cpu" in f.profiles]
    with_missed = next(f for f in committed if f.missed_by)
    fewer_gates = [dataclasses.replace(f, missed_by=()) if f is with_missed else f for f in committed]
    a_fix = [dataclasses.replace(f, fixes=True) if f.gate == "equivalence" and not f.fixes else f for f in committed]
    digests = {fault_set.faults_sha256(s) for s in (committed, fewer_gates, a_fix)}
    assert len(digests) == 3
