"""gate_selftest on the fixture fork: the real machinery (copies, a mount namespace per fault, an incremental rebuild,
the real gates) with faults aimed at the fixture's library, which its test-backend-ops stand-in reports on."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from ci import places, schema
from ci.commands import gate_selftest
from ci.errors import ConfigError
from ci.gates import registry
from ci.gates.results import Status
from ci.gates.selftest import faults as fault_set
from ci.gates.selftest import run as selftest
from ci.release import ledger
from ci.source.series import Series
from ci.source.sync import Source
from tests.support.build import build_cpu, stand_in_flags
from tests.support.messages import pattern, said
from tests.support.project import Project

FAULTS = """\
faults:
  - id: answer-off-by-one
    file: ggml/ggml.c
    search: "return 42;"
    replace: "return 43;"
    gate: backend_ops
    expect: failed
    profiles: [cpu]
    why: the library computes a wrong answer, as a kernel fault does
  - id: moved-away
    file: ggml/ggml.c
    search: "return ggml_old_name();"
    replace: "return 0;"
    gate: backend_ops
    expect: failed
    profiles: [cpu]
    why: aimed at code the pin no longer has
  - id: comment
    file: ggml/ggml.c
    search: "int ggml_fixture_answer(void) { return 42; }"
    replace: "int ggml_fixture_answer(void) { return 42; } /* a comment edit */"
    gate: all
    expect: passed
    profiles: [cpu]
    why: a benign edit every gate must pass
  - id: cmake-comment
    file: ggml/ggml.cmake
    search: "# Build the commit string with optional dirty flag"
    replace: "# Build the commit string with optional dirty flag (a comment edit)"
    gate: all
    expect: passed
    profiles: [cpu]
    why: a benign edit that configures again, so build_commit comes out -dirty (a shader edit's case on Vulkan)
"""


# a fault the older checks get past: equivalence must fail it, backend_ops and archs pass it
MISSED_BY = """\
faults:
  - id: snapshot-slot
    file: ggml/src/ggml-cpu/ops.cpp
    search: a
    replace: b
    gate: equivalence
    expect: failed
    missed_by: [backend_ops, archs]
    profiles: [cpu]
    why: w
"""


# the verdict line: the summary's counts, then its timings (any text) and the ledger line
VERDICT = gate_selftest.VERDICT_LINE.format(summary=selftest.SUMMARY + "{timings}", line="{line}")


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            h.update(f"{p.relative_to(path)}\0{st.st_mtime_ns}\0".encode() + p.read_bytes())
    return h.hexdigest()


@pytest.mark.slow
def test_caught_stale_and_benign_on_the_fixture_fork(
    make_build_project: Callable[..., Project], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    project = make_build_project()
    project.pins.write_text(project.pins.read_text().replace("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 36"))
    monkeypatch.setenv("ONEBIT_CMAKE_ARGS", stand_in_flags())
    monkeypatch.setenv("ONEBIT_CI_ROOT", str(project.root))  # the fault runs (python -m ci in a namespace) find this project
    assert build_cpu(project).code == 0
    faults = tmp_path / "faults.yaml"
    faults.write_text(FAULTS)
    before = (tree_digest(project.submodule), tree_digest(project.root / "build" / "cpu"))
    r = project.ci("gate-selftest", "--profile", "cpu", "--faults", str(faults))
    assert (tree_digest(project.submodule), tree_digest(project.root / "build" / "cpu")) == before  # the user's tree and build untouched
    assert r.code == 7, r.out + r.err  # the stale fault is not as expected
    lines = r.out.splitlines()
    stale = fault_set.STALE_NO_MATCH.format(file="ggml/ggml.c", anchor="return ggml_old_name();")
    assert selftest.FAULT_SAYS.format(fault="moved-away", what=stale) in lines
    row = {
        ln.split()[0]: ln.split()
        for ln in lines
        if ln.split() and ln.split()[0] in ("answer-off-by-one", "moved-away", "comment", "cmake-comment")
    }
    assert row["answer-off-by-one"][1:4] == ["backend_ops", "failed", "failed"]
    assert row["comment"][1:4] == ["all", "passed", "passed"]
    assert row["cmake-comment"][1:4] == ["all", "passed", "passed"]  # planted, configured again, -dirty: judged as planted
    assert row["moved-away"][3] == selftest.GOT_STALE
    assert said(VERDICT, r.out, verdict="FAILED", caught=1, faults=2, benign=2, benigns=2)
    assert "-dirty" in (project.root / "build" / "selftest" / "cpu" / "cmake-comment" / "gates" / "backend_ops.json").read_text()
    for fault in ("answer-off-by-one", "comment", "cmake-comment"):  # the copies are gone once judged; the records stay
        work = project.root / "build" / "selftest" / "cpu" / fault
        assert not (work / "src").exists()
        assert not (work / "build").exists()
        assert (work / "rebuild.json").is_file()
    (rec,) = [x for x in ledger.read(project.root / "build" / "results" / "ledger.jsonl").records if x.gate == "gate_selftest"]
    assert rec.verdict == "failed"
    assert rec.build_key == json.loads((project.root / "build" / "cpu" / "build.json").read_text())["key"]
    rebuild = json.loads((project.root / "build" / "selftest" / "cpu" / "answer-off-by-one" / "rebuild.json").read_text())
    assert rebuild["seconds"] < 30
    # without the stale fault every fault is as expected, and ship counts it when pins.yaml requires it
    faults.write_text(
        FAULTS.replace("  - id: moved-away", "  - id: moved-away-x")
        .replace("return ggml_old_name();", "int ggml_fixture_answer(void) { return 42; } /* x */")
        .replace(
            "gate: backend_ops\n    expect: failed\n    profiles: [cpu]\n    why: aimed",
            "gate: backend_ops\n    expect: passed\n    profiles: [cpu]\n    why: aimed",
        )
    )
    r = project.ci("gate-selftest", "--profile", "cpu", "--faults", str(faults), "--fault", "answer-off-by-one", "--keep")
    assert r.code == 0, r.out + r.err
    assert (project.root / "build" / "selftest" / "cpu" / "answer-off-by-one" / "src" / "ggml" / "ggml.c").is_file()  # --keep
    assert said(VERDICT, r.out, verdict="PASSED", caught=1, faults=1, benign=0, benigns=0)


def test_faults_file_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "faults.yaml"
    bad.write_text(FAULTS.replace("gate: backend_ops", "gate: backendops", 1))
    not_a_gate = fault_set.NOT_A_GATE.format(gate="backendops", known=", ".join((*registry.plantable(), "all")))  # the registry's, in order
    with pytest.raises(ConfigError, match=re.escape(schema.AT_KEY.format(file=bad, key="faults[0].gate", problem=not_a_gate))):
        selftest.load_faults(bad)
    bad.write_text(FAULTS.replace("id: comment\n", "id: answer-off-by-one\n"))
    twice = fault_set.ID_TWICE.format(id="answer-off-by-one")
    with pytest.raises(ConfigError, match=re.escape(schema.AT_KEY.format(file=bad, key="faults[2].id", problem=twice))):
        selftest.load_faults(bad)


@pytest.mark.parametrize("fault_id", ["/tmp/elsewhere", "../../outside", "..", ".hidden", "a/b", "x y"])
def test_a_fault_id_that_is_a_path_is_refused(tmp_path: Path, fault_id: str) -> None:
    """The id names the fault's directory, which the self-test deletes and fills: an absolute id or one with ".."
    once had a directory outside the checkout deleted (issue 24)."""
    bad = tmp_path / "faults.yaml"
    bad.write_text(FAULTS.replace("id: comment\n", f"id: {json.dumps(fault_id)}\n"))
    problem = fault_set.NOT_A_FAULT_ID.format(id=fault_id, why=places.ID_RULE)  # why: ci.places says it
    with pytest.raises(ConfigError, match=re.escape(schema.AT_KEY.format(file=bad, key="faults[2].id", problem=problem))):
        selftest.load_faults(bad)


def test_the_committed_faults_aim_at_the_real_forks_files() -> None:
    faults = selftest.load_faults()
    kernel = [f for f in faults if f.gate == "backend_ops"]
    speculative = [f for f in faults if f.gate == "equivalence"]
    benign = [f for f in faults if f.expect.value == "passed"]
    assert any("ggml-cuda" in f.file for f in kernel)
    assert any(f.file.endswith(".comp") for f in kernel)
    assert len(speculative) >= 2
    assert benign


def test_a_stale_fault_is_named_with_its_anchor() -> None:
    (fault,) = [f for f in selftest.load_faults() if f.id == "cuda-gdn-decay"]
    assert fault_set.stale(fault, "no kernel here") == fault_set.STALE_NO_MATCH.format(file=fault.file, anchor=fault.search)
    twice = fault_set.stale(fault, fault.search + fault.search)
    assert twice is not None
    assert pattern(fault_set.STALE_MATCHES, file=fault.file, count=2).match(twice)
    assert fault_set.stale(fault, None) == fault_set.STALE_MISSING.format(file=fault.file)
    assert fault_set.stale(fault, "x" + fault.search + "y") is None


def test_missed_by_runs_the_older_checks_too_and_wants_them_passed(tmp_path: Path) -> None:
    faults = tmp_path / "missed.yaml"
    faults.write_text(MISSED_BY)
    (fault,) = selftest.load_faults(faults)
    assert fault.gates == ("equivalence", "backend_ops", "archs")
    failed, passed = Status.FAILED, Status.PASSED
    caught = selftest.Outcome(fault, {"equivalence": failed, "backend_ops": passed, "archs": passed}, "", 1.0)
    assert caught.ok
    got = (("equivalence", "failed"), ("backend_ops", "passed"), ("archs", "passed"))
    assert caught.got_text == ", ".join(selftest.GOT_GATE.format(gate=g, status=s) for g, s in got)
    assert not selftest.Outcome(
        fault, {"equivalence": failed, "backend_ops": failed, "archs": passed}, "", 1.0
    ).ok  # an old check caught it
    assert not selftest.Outcome(fault, {"equivalence": passed, "backend_ops": passed, "archs": passed}, "", 1.0).ok
    row = selftest.table([caught]).splitlines()[-1]
    assert "equivalence" + selftest.MISSED_BY.format(gates="backend_ops, archs") in row
    assert "failed" + selftest.MISSED_BY_PASSED.format(gates="backend_ops, archs") in row
    bad = tmp_path / "faults.yaml"
    bad.write_text(FAULTS.replace("    gate: backend_ops\n", "    gate: backend_ops\n    missed_by: [backend_ops]\n", 1))
    not_another = fault_set.NOT_ANOTHER_GATE.format(gate="backend_ops", known=", ".join(g for g in registry.plantable() if g != "backend_ops"))
    with pytest.raises(ConfigError, match=re.escape(schema.AT_KEY.format(file=bad, key="faults[0].missed_by[0]", problem=not_another))):
        selftest.load_faults(bad)
    # a run that stopped after the old checks passed judged only part of the fault: never as expected
    assert not selftest.Outcome(fault, {"backend_ops": passed, "archs": passed}, "", 1.0).ok


def test_a_fault_run_that_never_ends_is_ended_at_the_timeout_with_its_tree_stand_in_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stand-in: a fault's namespace run replaced by a shell that never ends and leaves a child (spec-accept-draft-token
    on the qwen35 legs was still going after 6 minutes on Vulkan, and the self-test waited with it). It is ended at the
    timeout, its child with it, and the outcome names the gates that did not finish."""
    faults = tmp_path / "missed.yaml"
    faults.write_text(MISSED_BY)
    (fault,) = selftest.load_faults(faults)
    trial = selftest.Trial(fault, tmp_path / fault.id)
    (trial.out).mkdir(parents=True)
    (trial.out / "backend_ops.json").write_text(json.dumps({"status": "passed", "problems": []}))  # one gate finished
    pids = tmp_path / "pids"
    script = f"sleep 600 & echo $! > {pids}; echo 'equivalence: near: code: started'; wait"
    monkeypatch.setattr(selftest, "namespace_argv", lambda *args: ["sh", "-c", script])
    ((t, code, output, seconds, timed_out),) = list(selftest._run_all(tmp_path, "cpu", [trial], None, 1, timeout=1.0))
    assert (t, timed_out) == (trial, True)  # its exit status is the shell's: 0 when its wait ended first, else SIGTERM's
    assert 1.0 <= seconds < 30.0
    child = int(pids.read_text())
    with contextlib.suppress(psutil.NoSuchProcess):  # gone, or a zombie its adopter has not reaped yet: no sleep 600 runs
        assert psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    o = selftest._outcome(fault, trial, code, output, seconds, 1.0)
    assert not o.ok
    assert o.problem == selftest.ENDED_AT_TIMEOUT.format(timeout=1.0, missing="equivalence, archs", last="equivalence: near: code: started")


def test_a_fault_timeout_that_is_not_positive_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(selftest.FAULT_TIMEOUT_NOT_POSITIVE.format(timeout=0))}$"):
        selftest.selftest("k", None, tmp_path, tmp_path, "cpu", None, ["cpu-gdn-snapshot-slot"], print, timeout=0)  # type: ignore[arg-type]


PIN_FAILS = """\
faults:
  - id: snapshot-slot
    file: ggml/src/ggml-cpu/ops.cpp
    search: a
    replace: b
    gate: equivalence
    expect: failed
    missed_by: [backend_ops]
    profiles: [cpu]
    why: w
  - id: offset-restored
    file: src/llama-context.cpp
    search: c
    replace: d
    gate: equivalence
    expect: passed
    fixes: true
    profiles: [cpu]
    why: the fix the pin lacks
"""


def test_a_fault_whose_gate_fails_the_unplanted_build_is_not_judged_unless_it_is_the_fix(tmp_path: Path) -> None:
    """c14872f fails equivalence itself (dflash-context): a fault judged by equivalence would be caught by the pin, and
    a benign edit alarm, for the pin's own reason. Those are named and not planted; the fix the pin lacks is planted."""
    path = tmp_path / "faults.yaml"
    path.write_text(PIN_FAILS)
    fault, fix = selftest.load_faults(path)
    assert (fault.fixes, fix.fixes) == (False, True)
    failing = {"equivalence": "failed: build/results/ledger.jsonl line 4"}
    blocked = fault_set.BLOCKED_BY.format(gate="equivalence", record="failed: build/results/ledger.jsonl line 4")
    assert fault_set.unjudged(fault, failing) == fault_set.NOT_JUDGED.format(blocked=blocked)
    assert fault_set.unjudged(fix, failing) is None
    blocked = fault_set.BLOCKED_BY.format(gate="backend_ops", record="error: x")
    assert fault_set.unjudged(fault, {"backend_ops": "error: x"}) == fault_set.NOT_JUDGED.format(blocked=blocked)
    assert fault_set.unjudged(fault, {}) is None
    told: list[str] = []  # every fault blocked: nothing is read from a source, nothing planted
    result, shown = selftest.selftest("k" * 64, None, tmp_path, tmp_path, "cpu", path, ["snapshot-slot"], told.append, failing=failing)  # type: ignore[arg-type]
    # the refusal names its next step: the fix the fix-fault plants, carried as a patch (issue 37, item 5), even when
    # --fault left the fix-fault out of this run
    carry = selftest.NEXT_CARRY_FIX.format(fix="offset-restored", file="src/llama-context.cpp", profile="cpu")
    why = selftest.NOT_JUDGED_NEXT.format(why=fault_set.unjudged(fault, failing), steps=carry)
    assert (result.status, told) == (Status.FAILED, [selftest.FAULT_SAYS.format(fault="snapshot-slot", what=why)])
    assert f"snapshot-slot: {fault.gate}: expected failed, got {selftest.GOT_NOT_RUN}; {why}" in result.problems
    assert selftest.GOT_NOT_RUN in shown
    # a gate with no fix-fault: how to find why it fails
    told.clear()
    failing = {"backend_ops": "error: x"}
    selftest.selftest("k" * 64, None, tmp_path, tmp_path, "cpu", path, ["snapshot-slot"], told.append, failing=failing)  # type: ignore[arg-type]
    find = selftest.NEXT_FIND.format(gate="backend_ops", profile="cpu")
    assert told == [selftest.FAULT_SAYS.format(fault="snapshot-slot", what=selftest.NOT_JUDGED_NEXT.format(why=fault_set.unjudged(fault, failing), steps=find))]
    assert not (tmp_path / "build").exists()
    path.write_text(PIN_FAILS.replace("    fixes: true\n", "    fixes: yes please\n"))
    with pytest.raises(ConfigError, match=re.escape(schema.AT_KEY.format(file=path, key="faults[1].fixes", problem=fault_set.NOT_A_FLAG))):
        selftest.load_faults(path)


def test_a_fix_the_checkout_carries_already_is_not_the_next_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Vulkan at c14872f + the offset patch, equivalence failed the unplanted build for another reason (the MTP leg),
    and the self-test said to carry the patch the series carried already: a fix whose search is gone from the checkout
    is no way out, and the step is to find why the gate fails."""
    from types import SimpleNamespace

    path = tmp_path / "faults.yaml"
    path.write_text(PIN_FAILS)
    fault, fix = selftest.load_faults(path)
    monkeypatch.setattr(selftest, "Git", lambda *a: SimpleNamespace(write_tree=lambda: "t" * 40))
    monkeypatch.setattr(selftest, "files_at", lambda gitdir, tree, paths: {p: fix.replace for p in paths})  # the fix is in
    told: list[str] = []
    failing = {"equivalence": "failed: build/results/ledger.jsonl line 4"}
    source = SimpleNamespace(gitdir=tmp_path, workdir=tmp_path)
    selftest.selftest("k" * 64, source, tmp_path, tmp_path, "cpu", path, ["snapshot-slot"], told.append, failing=failing)  # type: ignore[arg-type]
    find = selftest.NEXT_FIND.format(gate="equivalence", profile="cpu")
    assert told == [selftest.FAULT_SAYS.format(fault="snapshot-slot", what=selftest.NOT_JUDGED_NEXT.format(why=fault_set.unjudged(fault, failing), steps=find))]


def test_the_unplanted_builds_failing_gates_come_from_its_newest_records(build_project: Project) -> None:
    """As ship reads them (tests/hostile/test_one_reading.py: a run on models of one's own is no failure of the gate)."""
    from ci.commands.gate_selftest import unplanted_failures
    from ci.compile.manifest import Manifest
    from ci.pin import pins as pins_mod
    from tests.release.test_ship import GATES, built, record

    m = built(build_project)
    book = build_project.root / "build" / "results" / "ledger.jsonl"
    manifest, pins = Manifest.from_json(m), pins_mod.load(build_project.pins)
    assert unplanted_failures(book, manifest, pins, build_project.root) == {}  # no ledger yet: nothing known to fail
    failed = dataclasses.replace(GATES.equivalence, status=Status.FAILED, summary="dflash-context")
    record(build_project, m, GATES.equivalence, failed, GATES.backend_ops_failed, GATES.backend_ops)  # the newest decides
    found = ledger.read(book)
    ledger.append(book, GATES.route, ledger.BuildContext("o" * 64, "p" * 40, "s" * 64, "cpu", "CPU"))  # another build's
    assert len(found.records) == 4
    recorded = gate_selftest.FAILING_RECORD.format(verdict="failed", ledger="build/results/ledger.jsonl", line=2)
    assert unplanted_failures(book, manifest, pins, build_project.root) == {"equivalence": recorded}


def test_the_summary_counts_a_fix_the_pin_lacks_apart_from_the_benign_edits(tmp_path: Path) -> None:
    """A ``fixes: true`` edit expects ``passed`` as a benign edit does, but it is no benign edit: the summary gives it a
    count of its own, so a stale fix does not read as an alarm on a benign edit."""
    path = tmp_path / "faults.yaml"
    path.write_text(PIN_FAILS)
    fault, fix = selftest.load_faults(path)
    outcomes = [
        selftest.Outcome(fault, {"equivalence": Status.FAILED, "backend_ops": Status.PASSED}, "", 1.0),  # caught, missed by backend_ops
        selftest.Outcome(fix, {}, "stale fault: x", 0.0, stale=True),
    ]
    result = selftest._result("k", outcomes, 1.0)
    assert result.summary.startswith(
        selftest.SUMMARY.format(verdict="FAILED", caught=1, faults=1, benign=0, benigns=0) + selftest.SUMMARY_FIXES.format(fixed=0, fixes=1)
    )


def test_a_fix_that_passed_planted_says_to_carry_it_where_faults_were_not_judged(tmp_path: Path) -> None:
    """At c14872f the self-test's own fix-fault passed, and the not-judged faults still said only "make it pass
    first" (issue 37, item 5): after the run, the fix that passed names the step that gets them judged."""
    path = tmp_path / "faults.yaml"
    path.write_text(PIN_FAILS)
    fault, fix = selftest.load_faults(path)
    outcomes = [
        selftest.Outcome(fault, {}, "not judged", 0.0, blocked_by=("equivalence",)),
        selftest.Outcome(fix, {"equivalence": Status.PASSED}, "", 3.0),
    ]
    line = selftest.FIX_PASSED_NEXT.format(gate="equivalence", file="src/llama-context.cpp", count=1)
    assert selftest.fix_passed_lines(outcomes) == [("offset-restored", line)]
    assert "docs/patches.md#add-a-patch" in line
    failed_fix = [outcomes[0], selftest.Outcome(fix, {"equivalence": Status.FAILED}, "", 3.0)]
    assert selftest.fix_passed_lines(failed_fix) == []  # a fix that did not pass is no step to take
    assert selftest.fix_passed_lines(outcomes[1:]) == []  # nothing waited on it


CARRIED = """\
faults:
  - id: offset-restored
    file: src/llama-context.cpp
    search: "const size_t dst_offset = 0;"
    replace: "const size_t dst_offset = token_offset * row;"
    gate: equivalence
    expect: passed
    fixes: true
    profiles: [cpu]
    why: the fix the pin lacks
"""


def fork_source(tmp_path: Path, at_pin: str, with_series: str) -> Source:
    """A fork whose pin has ``at_pin`` in src/llama-context.cpp and whose checkout, the series applied (in the index,
    as sync leaves it), has ``with_series``."""
    work = tmp_path / "fork"
    (work / "src").mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=work, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q", "-b", "main")
    (work / "src" / "llama-context.cpp").write_text(at_pin)
    git("add", "-A")
    git("-c", "user.name=Fixture", "-c", "user.email=fixture@example.invalid", "commit", "-qm", "the pin")
    pin = git("rev-parse", "HEAD")
    (work / "src" / "llama-context.cpp").write_text(with_series)
    git("add", "-A")
    return Source("third_party/fork", work, work / ".git", pin, "https://example.invalid/fork.git", (), Series(tmp_path / "patches", ()))


def test_a_fix_fault_the_series_carries_is_stale_as_it_should_be(tmp_path: Path) -> None:
    """A fix-fault goes stale once the series carries its fix: that is as it should be, and is said so; once the pin
    itself carries it, the fault is to be dropped."""
    path = tmp_path / "faults.yaml"
    path.write_text(CARRIED)
    source = fork_source(tmp_path, "const size_t dst_offset = 0;\n", "const size_t dst_offset = token_offset * row;\n")
    told: list[str] = []
    result, shown = selftest.selftest("k" * 64, source, tmp_path, tmp_path, "cpu", path, [], told.append)
    assert told == [selftest.FAULT_SAYS.format(fault="offset-restored", what=selftest.SERIES_CARRIES_FIX)]
    assert result.status is Status.PASSED, result.problems
    assert result.summary.startswith(
        selftest.SUMMARY.format(verdict="PASSED", caught=0, faults=0, benign=0, benigns=0) + selftest.SUMMARY_CARRIED.format(carried=1)
    )
    assert selftest.GOT_CARRIED in shown
    # the pin carries it: drop the fault
    (tmp_path / "fork").rename(tmp_path / "old-fork")
    source = fork_source(tmp_path, "const size_t dst_offset = token_offset * row;\n", "const size_t dst_offset = token_offset * row;\n")
    told.clear()
    result, _ = selftest.selftest("k" * 64, source, tmp_path, tmp_path, "cpu", path, [], told.append)
    assert told == [selftest.FAULT_SAYS.format(fault="offset-restored", what=selftest.PIN_CARRIES_FIX.format(faults=path))]
    assert result.status is Status.FAILED
    # stale for another reason: the stale message as before
    (tmp_path / "fork").rename(tmp_path / "older-fork")
    source = fork_source(tmp_path, "elsewhere\n", "elsewhere\n")
    told.clear()
    selftest.selftest("k" * 64, source, tmp_path, tmp_path, "cpu", path, [], told.append)
    stale = fault_set.STALE_NO_MATCH.format(file="src/llama-context.cpp", anchor="const size_t dst_offset = 0;")
    assert told == [selftest.FAULT_SAYS.format(fault="offset-restored", what=stale)]


def test_plant_says_a_missing_file_does_not_exist_and_a_directory_is_not_regular(tmp_path: Path) -> None:
    """A missing file had been reported as "not a regular file (a link or a directory)" (issue 37, item 5)."""
    checkout, build = tmp_path / "checkout", tmp_path / "build"
    (checkout / "src" / "dir.cpp").mkdir(parents=True)
    build.mkdir()
    path = tmp_path / "faults.yaml"
    path.write_text(CARRIED)
    (fix,) = selftest.load_faults(path)
    with pytest.raises(ConfigError) as exc:
        selftest.plant(checkout, build, fix, tmp_path / "area")
    assert exc.value.message == selftest.PLANT_MISSING.format(fault="offset-restored", file="src/llama-context.cpp")
    in_a_directory = dataclasses.replace(fix, file="src/dir.cpp")
    with pytest.raises(ConfigError) as exc:
        selftest.plant(checkout, build, in_a_directory, tmp_path / "area")
    assert exc.value.message == selftest.PLANT_NOT_REGULAR.format(fault="offset-restored", file="src/dir.cpp")
