"""A fork of the fixture CMake project with a history to bisect: 32 commits after the fixture, a regression planted at
one of them (ggml's answer changes, so the fixture's test-backend-ops replays the real CPU one's failing run), and
one commit where the series' patch does not apply (it rewrites the line the patch changes; the next restores it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.build import FIXTURE, BuildFork, make_build_fork
from tests.support.patches import add_to_series, make_patch_text
from tests.support.project import Project

COMMITS = 32
REGRESSION = 21  # c21 plants the fault
CONFLICT = 16  # c16 rewrites the line the series' patch changes; c17 puts it back
SERVER = "tools/server/server.cpp"
SERVER_TEXT = (FIXTURE / SERVER).read_text()
GGML_TEXT = (FIXTURE / "ggml" / "ggml.c").read_text()
PATCH_OLD, PATCH_NEW, CONFLICT_LINE = "llama-server %s", "llama-server says %s", "llama-server: %s"


@dataclass(frozen=True)
class BisectFork:
    fork: BuildFork
    commits: tuple[str, ...]  # c1..c32, index 0 is c1

    def c(self, n: int) -> str:
        return self.commits[n - 1]

    @property
    def path(self) -> Path:
        return self.fork.path


def make_bisect_fork(path: Path) -> BisectFork:
    fork = make_build_fork(path)
    b = fork.builder
    commits = []
    for n in range(1, COMMITS + 1):
        files: dict[str, str | bytes | None] = {f"notes/c{n:02d}.txt": f"commit {n}\n"}
        subject = f"notes: commit {n}"
        if n == REGRESSION:
            files["ggml/ggml.c"] = GGML_TEXT.replace("return 42;", "return 41;")
            subject = "ggml: fold the answer's rounding into the kernel"
        if n == CONFLICT:
            files[SERVER] = SERVER_TEXT.replace(PATCH_OLD, CONFLICT_LINE)
            subject = "server: reword the banner"
        if n == CONFLICT + 1:
            files[SERVER] = SERVER_TEXT
            subject = "server: restore the banner"
        commits.append(b.commit(subject, files))
    return BisectFork(fork, tuple(commits))


def add_server_patch(project: Project, fork: BisectFork) -> None:
    """The series: one patch on the server's banner (not ggml/, so ggml's build commit stays clean)."""
    add_to_series(
        project.root,
        "banner.patch",
        make_patch_text(fork.fork.builder, fork.fork.f0, {SERVER: SERVER_TEXT.replace(PATCH_OLD, PATCH_NEW)}, subject="server: say hello"),
    )
