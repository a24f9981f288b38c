"""Hostile pass 5: attacks tried on a shippable fixture build (a signed ledger, a witness) that ship refuses now.

Each test sets up a build whose gates passed, then does one thing an attacker with this user's rights would between
gpu_tests and ship, and holds ship to writing nothing: a library of the build swapped (its stat data put back), ship
run under another setting of a variable that changes results, a signed passing record copied in from another build's
ledger under the same key.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ci.compile import manifest as manifest_mod
from ci.release import ledger
from ci.release import witness as witness_mod
from tests.release.test_ship import GATES, built, record, ship
from tests.support.build import BuildFork
from tests.support.project import Project, make_project


@pytest.fixture
def signed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ledger's key and a witness outside build/, as CI's GPU job sets them; the witness's path."""
    witness = tmp_path / "runner-state" / "ledger.witness"
    witness.parent.mkdir()
    monkeypatch.setenv(ledger.KEY_VAR, "pass-5-key")
    monkeypatch.setenv(witness_mod.WITNESS_VAR, str(witness))
    return witness


def wrote_nothing(project: Project) -> bool:
    dist = project.root / "dist"
    return not dist.exists() or not any(dist.iterdir())


def test_a_library_swapped_after_the_gates_with_its_stat_data_put_back_is_refused(build_project: Project, signed: Path) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    (name, lib), *_ = m["libraries"].items()
    path = build_project.root / "build" / "cpu" / lib["path"]
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size; the bytes of another library
    with open(path, "r+b") as fh:  # in place: the same inode
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = ship(build_project)
    assert r.code != 0, r.out + r.err
    assert manifest_mod.DIFFERS in r.err, r.err
    assert name in r.err or lib["path"] in r.err, r.err
    assert wrote_nothing(build_project)


def test_gates_passed_under_one_setting_do_not_ship_under_another(
    build_project: Project, signed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GGML_SCHED_MAX_COPIES", "2")
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    monkeypatch.delenv("GGML_SCHED_MAX_COPIES")
    r = ship(build_project)
    assert r.code == 7, r.out + r.err
    assert r.out.count("environment") >= 3, r.out  # every gate's record: it judged another environment
    assert wrote_nothing(build_project)


def test_a_signed_pass_copied_from_another_builds_ledger_does_not_count(
    build_project: Project, build_fork: BuildFork, signed: Path, tmp_path: Path
) -> None:
    """Another build of the same key signs with the same key (one CI secret): its passing backend_ops record, copied
    over this ledger's last (a FAILED one), with the head put back as it was."""
    other = make_project(tmp_path / "other", build_fork.as_fork(), build_fork.f0)
    om = built(other)
    record(other, om, GATES.route, GATES.backend_ops, GATES.equivalence)

    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops_failed, GATES.equivalence)
    results = build_project.root / "build" / "results"
    lines = (results / "ledger.jsonl").read_bytes().splitlines(keepends=True)
    theirs = (other.root / "build" / "results" / "ledger.jsonl").read_bytes().splitlines(keepends=True)
    (results / "ledger.jsonl").write_bytes(b"".join([*lines[:1], theirs[1], *lines[2:]]))  # their pass over our FAILED
    r = ship(build_project)
    assert r.code != 0, r.out + r.err
    assert wrote_nothing(build_project)
