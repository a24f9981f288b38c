"""A third hostile pass on ship: evidence made against other criteria than those in force at ship time, or a wheel
holding other files than those its gates judged. Each of these wrote dist/ before its fix."""

from __future__ import annotations

import dataclasses

from ci.gates import equivalence
from ci.release import binding
from ci.release import ship as release_ship
from tests.release.test_ship import GATES, built, record, ship
from tests.support.messages import said
from tests.support.project import Project


def test_an_equivalence_run_on_other_prompts_than_the_committed_ones_does_not_count(build_project: Project) -> None:
    """The prompts are the gate's criteria as much as its token count: ci/prompts cut to one short prompt for the
    gpu_tests run, then put back, shipped on the record of the easier run."""
    m = built(build_project)
    committed = equivalence.load_prompts()
    easier = equivalence.prompts_sha256(committed[:1])
    ran = dataclasses.replace(GATES.equivalence, properties=(*GATES.equivalence.properties, ("prompts_sha256", easier)))
    record(build_project, m, GATES.route, GATES.backend_ops, ran)
    r = ship(build_project)
    assert r.code == 7, r.out
    assert said(release_ship.TABLE_ROW, r.out, gate="equivalence", state="MISSING")
    now = equivalence.prompts_sha256(committed)  # each shown as its first 57 characters and ...
    changed = binding.CRITERION_CHANGED.format(criterion="prompts_sha256", judged=f"{easier[:57]}...", current=f"{now[:57]}...")
    assert binding.OTHER_CRITERIA.format(changes=changed) in r.out
    assert not (build_project.root / "dist").exists()
    record(build_project, m, GATES.equivalence)  # a run on the committed prompts counts
    assert ship(build_project, "--check").code == 0
