"""A third hostile pass on ship: evidence made against other criteria than those in force at ship time, or a wheel
holding other files than those its gates judged. Each of these wrote dist/ before its fix."""

from __future__ import annotations

import dataclasses
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from ci import cli, defaults, digests
from ci.gates.equivalence import plan as eq_plan
from ci.gates.results import GateResult, Status
from ci.gates.route import run as route
from ci.gates.serving import launcher as launcher_files
from ci.gates.serving import prompts as prompt_set
from ci.release import binding, ledger
from ci.release import ship as release_ship
from ci.release import standings as release_standings
from tests.release.test_ship import GATES, built, record, ship
from tests.release.test_ship_attacks import PERF_PINS, perf_result
from tests.support.messages import said
from tests.support.project import Project


def test_an_equivalence_run_on_other_prompts_than_the_committed_ones_does_not_count(build_project: Project) -> None:
    """The prompts are the gate's criteria as much as its token count: ci/prompts cut to one short prompt for the
    gpu_tests run, then put back, shipped on the record of the easier run."""
    m = built(build_project)
    committed = prompt_set.load_prompts()
    easier = eq_plan.prompts_sha256(committed[:1])
    ran = dataclasses.replace(GATES.equivalence, properties=(*GATES.equivalence.properties, ("prompts_sha256", easier)))
    record(build_project, m, GATES.route, GATES.backend_ops, ran)
    r = ship(build_project)
    assert r.code == 7, r.out
    assert said(release_ship.TABLE_ROW, r.out, gate="equivalence", state="MISSING")
    now = eq_plan.prompts_sha256(committed)  # each shown as its first 57 characters and ...
    changed = binding.CRITERION_CHANGED.format(criterion="prompts_sha256", judged=f"{easier[:57]}...", current=f"{now[:57]}...")
    assert binding.OTHER_CRITERIA.format(changes=changed) in r.out
    assert not (build_project.root / "dist").exists()
    record(build_project, m, GATES.equivalence)  # a run on the committed prompts counts
    assert ship(build_project, "--check").code == 0


def test_a_link_to_a_folder_in_the_launcher_does_not_ship_files_its_digest_never_read(
    build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher's digest listed serve/'s files without following a link to a folder; the wheel's copy followed it.
    A package linked in from outside serve/ shipped whatever it held at ship time, never judged by any gate. Now the
    digest holds the link (never followed), and every command refuses to start beside it (issue 36)."""
    launcher = tmp_path / "serve"
    shutil.copytree(launcher_files.launcher_dir(), launcher, ignore=shutil.ignore_patterns(*launcher_files.LAUNCHER_SKIPS))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "__init__.py").write_text("")
    monkeypatch.setattr(launcher_files, "launcher_dir", lambda: launcher)
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    judged = launcher_files.launcher_sha256()
    (launcher / "extras").symlink_to(outside, target_is_directory=True)
    (outside / "__init__.py").write_text("import os  # after the gates ran\n")
    assert launcher_files.launcher_sha256() != judged  # the digest sees the link
    r = ship(build_project)
    assert r.code == 4, r.out
    why = digests.A_LINK.format(target=outside)
    assert r.err == cli.ERROR.format(message=digests.STRAY.format(path="serve/extras", why=why, more="")) + "\n"
    assert not (build_project.root / "dist").exists()
    (launcher / "extras").unlink()  # the launcher as its gates judged it, without the link
    r = ship(build_project)
    assert r.code == 0, r.err
    with zipfile.ZipFile(next((build_project.root / "dist").glob("onebit_serve-*.whl"))) as zf:
        assert not any(n.startswith("serve/extras") for n in zf.namelist())


def test_a_perf_pass_judged_before_the_last_release_does_not_count(make_build_project: Callable[..., Project]) -> None:
    """The perf gate holds a build to the last release's figures. A pass measured while no release (or an older,
    slower one) was in the ledger shipped after a faster release came in, a regression no check had compared."""
    project = make_build_project(PERF_PINS)
    m = built(project)
    record(project, m, GATES.route, GATES.backend_ops, GATES.equivalence, perf_result(str(defaults.PERF_ROUNDS)))
    assert ship(project, "--check").code == 0
    book = project.root / "build" / "results" / "ledger.jsonl"
    other = ledger.BuildContext(build_key="f" * 64, pin="e" * 40, profile="cpu")  # another build, shipped since
    faster = dataclasses.replace(perf_result(str(defaults.PERF_ROUNDS)), metrics=(("tokens_per_step(draft, code).median", 9.0),))
    ledger.append(book, faster, other)
    ledger.append(book, GateResult(release_standings.SHIP, Status.PASSED, "shipped"), other)
    r = ship(project)
    assert r.code == 7, r.out
    assert said(release_ship.TABLE_ROW, r.out, gate="perf".ljust(len("equivalence")), state="MISSING")
    why = release_standings.OTHER_BASELINE.format(judged=release_standings.NO_RELEASE, now=release_standings.RELEASE_AT.format(pin="e" * 7))
    assert release_standings.NOT_COUNTED.format(why=why, line=4, more="") in r.out
    assert not (project.root / "dist").exists()
    released = dataclasses.replace(perf_result(str(defaults.PERF_ROUNDS)), properties=(*perf_result(str(defaults.PERF_ROUNDS)).properties, ("released_pin", "e" * 40)))
    record(project, m, released)  # measured against that release: counts
    assert ship(project, "--check").code == 0


HOOK = "\n\ndef pytest_collection_modifyitems(items):  # for the gate run only\n    items[:] = items[:5]\n"
EDITS = {
    "tests/conftest.py": lambda text: text + HOOK,
    "tests/serve/conftest.py": lambda text: text + HOOK,
    "conftest.py": lambda text: text + HOOK,  # none is committed: one added at the root is read too
    "tests/support/fixtures.py": lambda text: text + HOOK,  # a plugin of the whole suite (tests/conftest.py)
    "pyproject.toml": lambda text: text.replace('addopts = ["-ra"', 'addopts = ["-k", "hadamard", "-ra"'),
}


@pytest.mark.parametrize("edited", sorted(EDITS))
def test_route_tests_run_under_a_conftest_edited_for_the_run_do_not_count(
    build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edited: str
) -> None:
    """A collection hook added to a conftest, or a -k to pytest's configuration, for the gpu_tests run and taken out
    afterwards: the route record said passed on 5 tests of 180, and shipped."""
    checkout = tmp_path / "checkout"  # the files that decide what the route gate runs, as committed
    for name in route.ROUTE_TESTS:
        if (launcher_files.SOURCE_ROOT / name).is_dir():
            shutil.copytree(launcher_files.SOURCE_ROOT / name, checkout / name, ignore=shutil.ignore_patterns(*launcher_files.LAUNCHER_SKIPS))
        elif (launcher_files.SOURCE_ROOT / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(launcher_files.SOURCE_ROOT / name, checkout / name)
    monkeypatch.setattr(route, "SOURCE_ROOT", checkout)
    m = built(build_project)
    path = checkout / edited
    committed = path.read_text() if path.exists() else None
    path.write_text(EDITS[edited](committed or ""))
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    judged = route.route_tests_sha256()
    if committed is None:
        path.unlink()
    else:
        path.write_text(committed)
    r = ship(build_project)
    assert r.code == 7, r.out
    assert said(release_ship.TABLE_ROW, r.out, gate="route".ljust(len("equivalence")), state="MISSING")
    now = route.route_tests_sha256()
    changed = binding.CRITERION_CHANGED.format(criterion="route_tests_sha256", judged=f"{judged[:57]}...", current=f"{now[:57]}...")
    assert binding.OTHER_CRITERIA.format(changes=changed) in r.out
    assert not (build_project.root / "dist").exists()
    record(build_project, m, GATES.route)  # run again on the committed tests: counts
    assert ship(build_project, "--check").code == 0


def test_records_judged_by_an_orchestration_edited_for_the_run_do_not_count(
    build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge weakened for the gpu_tests run (here a line of ci/gates/route/run.py) and put back afterwards: every record
    it wrote counted, although no committed code judged the build."""
    orchestration = tmp_path / "ci"
    shutil.copytree(binding.orchestration_dir(), orchestration, ignore=shutil.ignore_patterns(*launcher_files.LAUNCHER_SKIPS))
    monkeypatch.setattr(binding, "orchestration_dir", lambda: orchestration)
    m = built(build_project)
    judge = orchestration / "gates" / "route" / "run.py"
    committed = judge.read_text()
    judge.write_text(committed.replace("status = Status.PASSED if not problems else Status.FAILED", "status = Status.PASSED"))
    assert judge.read_text() != committed
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    judged = binding.orchestration_sha256()
    judge.write_text(committed)
    r = ship(build_project)
    assert r.code == 7, r.out
    now = binding.orchestration_sha256()
    changed = binding.CRITERION_CHANGED.format(criterion="ci_sha256", judged=f"{judged[:57]}...", current=f"{now[:57]}...")
    assert binding.OTHER_CRITERIA.format(changes=changed) in r.out
    for gate in ("route", "backend_ops", "equivalence"):
        assert said(release_ship.TABLE_ROW, r.out, gate=gate.ljust(len("equivalence")), state="MISSING"), r.out
    assert not (build_project.root / "dist").exists()
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)  # the gates again under the committed code: they count
    assert ship(build_project, "--check").code == 0


def test_a_perf_pass_measured_through_another_launcher_does_not_count(make_build_project: Callable[..., Project], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """perf measures llama-servers started through 1bit serve, its recipes applied: a pass measured with one launcher
    counted for a launcher edited afterwards (a recipe that slows the server ships on the figures of the one before)."""
    launcher = tmp_path / "serve"
    shutil.copytree(launcher_files.launcher_dir(), launcher, ignore=shutil.ignore_patterns(*launcher_files.LAUNCHER_SKIPS))
    monkeypatch.setattr(launcher_files, "launcher_dir", lambda: launcher)
    project = make_build_project(PERF_PINS)
    m = built(project)
    record(project, m, GATES.route, GATES.backend_ops, GATES.equivalence, perf_result(str(defaults.PERF_ROUNDS)))
    assert ship(project, "--check").code == 0
    judged = launcher_files.launcher_sha256()
    with (launcher / "recipes.py").open("a") as f:
        f.write("\n# a recipe edited after the perf gate ran\n")
    record(project, m, GATES.route, GATES.equivalence)  # the launcher's own gates again: they count, perf does not
    r = ship(project, "--check")
    assert r.code == 7, r.out
    assert said(release_ship.TABLE_ROW, r.out, gate="perf".ljust(len("equivalence")), state="MISSING"), r.out
    now = launcher_files.launcher_sha256()
    changed = binding.CRITERION_CHANGED.format(criterion="launcher_sha256", judged=f"{judged[:57]}...", current=f"{now[:57]}...")
    assert binding.OTHER_CRITERIA.format(changes=changed) in r.out
