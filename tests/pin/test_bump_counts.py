"""bump_pin reads each expect.backend_ops count from the new pin's own test program and says where pins.yaml's
differs, before anything is built or gated; pins.yaml takes the pin's only with --accept-counts."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from ci.commands import bump_pin
from ci.errors import ConfigError
from ci.pin import pins as pins_mod
from ci.source import op_cases
from tests.source.test_op_cases import gdn_lines, program
from tests.support.gitrepo import RepoBuilder
from tests.support.messages import said
from tests.support.project import Fork, Project, make_project

ENTRY = '{cases: 54, from: "engine #229 (ROCmFPX#4, pin b82c8b8)"}'


@dataclass(frozen=True)
class CountsFork:
    path: Path
    pinned: str  # lists 54 GATED_DELTA_NET cases
    fewer: str  # lists 36, and 6 more in the perf function
    builder: RepoBuilder


@pytest.fixture
def counts_fork(tmp_path: Path) -> CountsFork:
    b = RepoBuilder(tmp_path / "fork.git", bare=True)
    pinned = b.commit("54 cases", {op_cases.TEST_PROGRAM: program(gdn_lines(54)), "README.md": "fork\n"})
    fewer = b.commit("fewer cases", {op_cases.TEST_PROGRAM: program(gdn_lines(36), perf_body=gdn_lines(6))})
    return CountsFork(Path(b.repo.path), pinned, fewer, b)


def project_with(tmp_path: Path, fork: CountsFork, entry: str) -> Project:
    project = make_project(tmp_path / "project", cast(Fork, fork), fork.pinned)
    text = project.pins.read_text().replace("    GATED_DELTA_NET: 54\n", f"    GATED_DELTA_NET: {entry}\n")
    project.pins.write_text(text)
    return project


def bump(project: Project, *args: str):  # type: ignore[no-untyped-def]
    return project.ci("bump-pin", *args, "--remote", str(project.fork.path), "--no-compile")


def test_the_bump_says_pins_yaml_against_the_pin_before_anything_runs_and_keeps_pins_yamls(tmp_path: Path, counts_fork: CountsFork) -> None:
    project = project_with(tmp_path, counts_fork, ENTRY)
    r = bump(project, counts_fork.fewer[:7])
    assert r.code == 0, r.err
    differs = op_cases.COUNT_DIFFERS.format(said=54, listed=36)
    line = bump_pin.COUNT_LINE.format(op="GATED_DELTA_NET", line=differs)
    assert line in r.out
    lines = r.out.splitlines()
    assert lines.index(line) < next(i for i, ln in enumerate(lines) if ln.startswith("bump_pin: wrote pins.yaml"))
    assert said(bump_pin.COUNTS_DIFFER_NEXT, r.out)
    assert "--accept-counts" in next(ln for ln in lines if ln.startswith("bump_pin: the counts differ"))
    assert pins_mod.load(project.pins).expected_cases() == {"GATED_DELTA_NET": 54}  # changed only when asked
    report = (project.root / "build" / "bump-report.md").read_text()
    assert op_cases.COUNTS_HEADING in report
    source = op_cases.COUNT_FROM.format(said=54, source="engine #229 (ROCmFPX#4, pin b82c8b8)")
    assert op_cases.REPORT_COUNT.format(op="GATED_DELTA_NET", line=differs + source) in report


def test_accept_counts_writes_the_pins_count_and_where_it_comes_from(tmp_path: Path, counts_fork: CountsFork) -> None:
    project = project_with(tmp_path, counts_fork, ENTRY)
    before = project.pins.read_text()
    r = bump(project, counts_fork.fewer[:7], "--accept-counts")
    assert r.code == 0, r.err
    accepted = op_cases.COUNT_ACCEPTED.format(said=54, listed=36)
    assert bump_pin.COUNT_LINE.format(op="GATED_DELTA_NET", line=accepted) in r.out
    assert not said(bump_pin.COUNTS_DIFFER_NEXT, r.out)
    loaded = pins_mod.load(project.pins)
    assert loaded.expected_cases() == {"GATED_DELTA_NET": 36}
    assert loaded.cases_from("GATED_DELTA_NET") == op_cases.ACCEPTED_FROM.format(commit=counts_fork.fewer[:7], date=dt.date.today().isoformat())
    changed = [b for a, b in zip(before.splitlines(), project.pins.read_text().splitlines(), strict=True) if a != b]
    assert len(changed) == 4  # commit, reference, date, and the count's one line: comments and order stay
    assert project.ci("verify-pin").code == 0


def test_a_bare_count_is_edited_in_place_and_an_agreeing_one_says_so(tmp_path: Path, counts_fork: CountsFork) -> None:
    project = project_with(tmp_path, counts_fork, "54")
    assert bump(project, counts_fork.fewer[:7], "--accept-counts").code == 0
    assert "    GATED_DELTA_NET: 36\n" in project.pins.read_text()
    again = counts_fork.builder.commit("more", {"README.md": "fork\nmore\n"})
    r = bump(project, again[:7])
    assert bump_pin.COUNT_LINE.format(op="GATED_DELTA_NET", line=op_cases.COUNT_AGREES.format(cases=36)) in r.out


def test_a_count_the_pin_does_not_say_is_unknown_never_guessed(project: Project) -> None:
    """The fixture fork has no test program: pins.yaml's count stands, and the report says the pin's is unknown."""
    r = bump(project, project.fork.c5[:7], "--accept-counts")
    assert r.code == 0, r.err
    unknown = op_cases.COUNT_UNKNOWN.format(said=54, why=op_cases.NO_PROGRAM.format(path=op_cases.TEST_PROGRAM))
    assert bump_pin.COUNT_LINE.format(op="GATED_DELTA_NET", line=unknown) in r.out
    assert pins_mod.load(project.pins).expected_cases() == {"GATED_DELTA_NET": 54}
    assert op_cases.REPORT_COUNT.format(op="GATED_DELTA_NET", line=unknown) in (project.root / "build" / "bump-report.md").read_text()


def test_pins_yaml_says_where_each_count_comes_from() -> None:
    """The project's own pins.yaml: every count names where it comes from (an engine PR, or the pin's program after
    --accept-counts). Nothing here names the pin or a count: a test that did would fail every bump's PR."""
    loaded = pins_mod.load(Path(__file__).resolve().parents[2] / "pins.yaml")
    assert loaded.expected_cases()
    assert all(loaded.cases_from(op).strip() for op in loaded.expected_cases())


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("{cases: 54}", "expect.backend_ops.GATED_DELTA_NET.from"),
        ('{cases: 54, from: "x", pr: 229}', "expect.backend_ops.GATED_DELTA_NET.pr"),
        ('{cases: 0, from: "x"}', "expect.backend_ops.GATED_DELTA_NET.cases"),
    ],
)
def test_an_entry_is_parsed_strictly(tmp_path: Path, entry: str, problem: str) -> None:
    text = (Path(__file__).resolve().parents[2] / "pins.yaml").read_text()
    text = text.replace(text[text.index("    GATED_DELTA_NET:") : text.index("\n", text.index("    GATED_DELTA_NET:"))], f"    GATED_DELTA_NET: {entry}")
    with pytest.raises(ConfigError) as caught:
        pins_mod.parse(text, tmp_path / "pins.yaml")
    assert problem in caught.value.message
