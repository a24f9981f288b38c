from __future__ import annotations

from tests.support.bisect_fork import BisectFork
from tests.support.project import Project


def test_probe(bisect_project: Project, bisect_fork: BisectFork) -> None:
    r = bisect_project.ci("bisect", "--profile", "cpu", "--gate", "backend_ops", "--remote", str(bisect_fork.path), "--good", bisect_fork.fork.f0, "--bad", bisect_fork.c(32))
    print(r.out, r.err)
    assert r.code == 0
