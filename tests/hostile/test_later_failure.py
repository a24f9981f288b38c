"""A failure is evidence whatever the settings it ran under; a pass counts only for the settings it judged (issue 36).

A record counts for ship only when it judged this build's binaries against today's criteria. A later FAILED record
under other criteria (an ad-hoc ``--tokens 4`` run that diverged, floors since removed from pins.yaml) was simply
not counted, and the earlier pass shipped: the ledger said this build had failed, and ship did not listen. Now a
FAILED record that judged this build's binaries, on the release's models, stands against every earlier pass, whatever
its criteria; a pass under today's criteria after it counts again."""

from __future__ import annotations

import dataclasses

from ci.gates.results import Status
from ci.release import binding
from ci.release import ship as release_ship
from ci.release import standings as release_standings
from tests.release.test_ship import GATES, built, record, ship
from tests.support.messages import said
from tests.support.project import Project

SHORT_FAILED = dataclasses.replace(
    GATES.equivalence,
    status=Status.FAILED,
    summary="FAILED: 2/3 prompts identical over 4 tokens",
    problems=("code: first divergence at token 2",),
    properties=(*GATES.equivalence.properties, ("tokens", "4")),
)


def test_a_later_failure_under_other_criteria_stands_against_an_earlier_pass(build_project: Project) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence, SHORT_FAILED)
    r = ship(build_project, "--check")
    assert r.code == 7, r.out + r.err
    assert said(release_ship.TABLE_ROW, r.out, gate="equivalence", state="FAILED")
    changed = binding.OTHER_CRITERIA.format(changes=binding.CRITERION_CHANGED.format(criterion="tokens", judged="4", current="256"))
    assert release_standings.FAILED_ELSEWHERE.format(why=changed, line=4) in r.out


def test_a_pass_under_todays_criteria_after_the_failure_counts_again(build_project: Project) -> None:
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence, SHORT_FAILED, GATES.equivalence)
    r = ship(build_project, "--check")
    assert r.code == 0, r.out + r.err
    assert said(release_ship.TABLE_ROW, r.out, gate="equivalence", state="passed")


def test_a_failure_on_other_models_or_other_binaries_stays_not_counted(build_project: Project) -> None:
    """An ad-hoc run on models of one's own (a far drafter's floors) judged something else than the release; a
    failure of other binaries judged another build. Neither stands against this build's pass."""
    m = built(build_project)
    elsewhere = dataclasses.replace(SHORT_FAILED, properties=(("models", "M.gguf + D.gguf"), ("tokens", "4")))
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence, elsewhere)
    r = ship(build_project, "--check")
    assert r.code == 0, r.out + r.err
