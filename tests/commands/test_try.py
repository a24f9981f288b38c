"""nox -s try: a fork commit that is not the pin, built and gated in build/try/<sha12>/ on the fixture CMake project
as a fork; pins.yaml, .gitmodules, the gitlink, the project's checkout and the release ledger stay byte for byte, and
ship never counts the try's records."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from ci.commands import try_fork
from ci.release import ledger, post
from ci.source import store as store_mod
from tests.support.build import BuildFork, build_cpu, make_build_fork, replay_flags
from tests.support.project import Project, make_project

SERVER = "tools/server/server.cpp"
pytestmark = pytest.mark.skipif(not try_fork.can_unshare(), reason="unshare gives no mount namespace on this machine: a try refuses to run here")


@dataclass(frozen=True)
class TryFork:
    fork: BuildFork
    pr: str  # refs/pull/3/head: the server's greeting changed
    side: str  # the tip of branch side: ggml.c changed


@pytest.fixture
def try_fork_(tmp_path: Path) -> TryFork:
    fork = make_build_fork(tmp_path / "fork.git")
    server = fork.builder.files_at(fork.f0)[SERVER].decode()
    assert "llama-server %s" in server
    pr = fork.builder.commit("server: say hello", {SERVER: server.replace("llama-server %s", "llama-server says %s")}, ref="refs/pull/3/head", parents=[fork.f0])
    ggml = fork.builder.files_at(fork.f0)["ggml/ggml.c"].decode()
    side = fork.builder.commit("ggml: another greeting", {"ggml/ggml.c": ggml + "\n/* side */\n"}, branch="side", parents=[fork.f0])
    return TryFork(fork, pr, side)


@pytest.fixture
def project(tmp_path: Path, try_fork_: TryFork, monkeypatch: pytest.MonkeyPatch) -> Project:
    """Pinned to f0, expecting the 36 GATED_DELTA_NET cases the fixture's test-backend-ops replays."""
    made = make_project(tmp_path / "project", try_fork_.fork.as_fork(), try_fork_.fork.f0)
    made.pins.write_text(made.pins.read_text().replace("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 36"))
    monkeypatch.setenv("ONEBIT_CMAKE_ARGS", replay_flags())
    return made


def digest_tree(path: Path) -> dict[str, str]:
    """Every file under ``path`` (a checkout, a git dir) by its sha256: what byte-identical means for a folder."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.rglob("*")) if p.is_file() and not p.is_symlink()}


def state(project: Project) -> dict[str, object]:
    """What a try must leave as it was: pins.yaml, .gitmodules, the index (the gitlink), the checkout, the fork store
    behind it, and the release ledger with its head."""
    root = project.root
    results = root / "build" / "results"
    return {
        "files": {p: (root / p).read_bytes() for p in ("pins.yaml", ".gitmodules", ".git/index")},
        "checkout": digest_tree(project.submodule),
        "store": {k: v for k, v in digest_tree(root / ".git" / "modules").items() if "/objects/" not in f"/{k}"},
        "ledger": digest_tree(results) if results.exists() else {},
        "gitlink": project.gitlink(),
    }


def tried(project: Project, *args: str):  # type: ignore[no-untyped-def]
    return project.ci("try", *args, "--remote", str(project.fork.path), "--profile", "cpu", "--gate", "backend_ops")


def try_ledger(project: Project, sha: str) -> ledger.Ledger:
    return ledger.read(project.root / "build" / "try" / sha[:12] / "results" / "ledger.jsonl")


def test_a_pull_request_is_built_and_gated_in_its_own_folder_and_nothing_of_the_pins_moves(project: Project, try_fork_: TryFork) -> None:
    before = state(project)
    r = tried(project, "refs/pull/3/head", "--post", "--dry-run", "--repo", "someone/ROCmFPX")
    assert r.code == 0, r.out + r.err
    where = f"build/try/{try_fork_.pr[:12]}"
    assert try_fork.TRYING.format(label="pull/3", sha=try_fork_.pr[:12], where=project.fork.path, profile="cpu", folder=where) in r.out
    assert state(project) == before
    assert not (project.root / "build" / "cpu").exists()  # the project's build dir: never made by a try
    records = try_ledger(project, try_fork_.pr).records
    assert [(rec.gate, rec.verdict) for rec in records] == [("backend_ops", "passed")]
    assert records[0].build_key.startswith(try_fork.KEY_PREFIX)
    assert records[0].data["pin"] == try_fork_.pr
    assert records[0].data["properties"]["try"] == try_fork_.pr
    summary = json.loads((project.root / where / "results" / "try.json").read_text())
    assert (summary["sha"], summary["pr"], summary["gates"][0]["verdict"]) == (try_fork_.pr, 3, "passed")
    built = json.loads((project.root / where / "build" / "cpu" / "build.json").read_text())
    assert built["pin"]["commit"] == try_fork_.pr
    # --post --dry-run: the status and the comment it would send, and nothing sent
    assert post.DRY_RUN in r.out
    assert post.REQUEST.format(method="POST", url=f"{post.API}/repos/someone/ROCmFPX/statuses/{try_fork_.pr}") in r.out
    assert post.CONTEXT.format(profile="cpu") in r.out
    assert f"{post.API}/repos/someone/ROCmFPX/issues/3/comments" in r.out
    assert json.dumps(post.MARKER)[1:-1] in r.out


def test_a_try_starts_from_the_pins_build_and_rebuilds_only_what_the_commit_changed(project: Project, try_fork_: TryFork) -> None:
    assert build_cpu(project).code == 0
    assert project.ci("gpu-tests", "--profile", "cpu", "--gate", "backend_ops").code == 0
    shipped = project.ci("ship", "--profile", "cpu", "--check")
    before = state(project)
    r = tried(project, try_fork_.pr[:7])
    assert r.code == 0, r.out + r.err
    assert try_fork.INCREMENTAL.format(profile="cpu") in r.out
    assert state(project) == before
    assert project.ci("ship", "--profile", "cpu", "--check").out == shipped.out  # the release ledger's standing
    pin_objects = project.root / "build" / "cpu" / "CMakeFiles"
    try_objects = project.root / "build" / "try" / try_fork_.pr[:12] / "build" / "cpu" / "CMakeFiles"
    ggml = Path("ggml.dir") / "ggml" / "ggml.c.o"
    server = Path("llama-server.dir") / "tools" / "server" / "server.cpp.o"
    assert (try_objects / ggml).stat().st_mtime_ns == (pin_objects / ggml).stat().st_mtime_ns  # not compiled again
    assert (try_objects / server).stat().st_mtime_ns != (pin_objects / server).stat().st_mtime_ns
    assert try_ledger(project, try_fork_.pr).records[0].verdict == "passed"


def test_ship_counts_no_try_record_even_read_from_the_trys_own_ledger(project: Project, try_fork_: TryFork) -> None:
    """Ship's reading of a ledger (standings) for the very build the try judged, its key: the try's records never
    stand for it, so a try's ledger copied over the release one would not ship either."""
    from ci.release import standings

    assert tried(project, "side").code == 0
    book = try_ledger(project, try_fork_.side)
    assert book.records
    key = json.loads((project.root / "build" / "try" / try_fork_.side[:12] / "build" / "cpu" / "build.json").read_text())["key"]
    assert {rec.build_key for rec in book.records} == {try_fork.KEY_PREFIX + key}
    (stood,) = standings.standings(book, key, required=("backend_ops",))
    assert stood.state is standings.Standing.STALE  # "no record for this build; the last ... judged key try:..."
    assert stood.record is None
    assert try_fork.KEY_PREFIX in stood.detail


@pytest.mark.parametrize(
    ("ref", "code", "message"),
    [
        ("pin", 4, try_fork.IS_THE_PIN),
        ("pull/99", 3, try_fork.NO_SUCH_PULL),
        ("not-a-thing", 2, try_fork.NO_SUCH_REF),
        ("refs/heads/sidee", 3, store_mod.BRANCH_NOT_IN_FORK),
    ],
)
def test_a_ref_that_names_nothing_to_try_is_one_line(project: Project, try_fork_: TryFork, ref: str, code: int, message: str) -> None:
    from tests.support.messages import said

    before = state(project)
    r = tried(project, try_fork_.fork.f0 if ref == "pin" else ref)
    assert r.code == code, r.out + r.err
    assert said(message, r.err), r.err
    assert len(r.err.strip().splitlines()) == 1
    assert state(project) == before
    assert not any((project.root / "build" / "try").glob("*/results"))


def test_the_try_folder_is_the_commits_and_a_second_try_reuses_its_build(project: Project, try_fork_: TryFork) -> None:
    assert tried(project, "pull/3").code == 0
    again = tried(project, "3")
    assert again.code == 0, again.err
    assert "build: up to date" in again.out
    assert len(try_ledger(project, try_fork_.pr).records) == 2
    assert os.path.isdir(project.root / "build" / "try" / "fork.git")


def test_post_sets_the_status_and_writes_the_comment_through_the_real_client(project: Project, try_fork_: TryFork, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.github import TOKEN, fake_github

    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    with fake_github("someone/ROCmFPX") as github:
        github.fail("POST", r".*/statuses/.*", 503)  # once: the client waits its backoff and sends it again
        r = tried(project, "pull/3", "--post", "--repo", "someone/ROCmFPX", "--api", github.api, "--report-url", "https://me.github.io/r/")
        assert r.code == 0, r.out + r.err
        (status,) = github.statuses[("someone/ROCmFPX", try_fork_.pr)]
        assert (status["state"], status["context"]) == ("success", post.CONTEXT.format(profile="cpu"))
        (comment,) = github.comments[("someone/ROCmFPX", 3)]
        assert "| backend_ops | passed |" in comment["body"]
        assert post.COMMENT_CREATED.format(url=comment["html_url"]) in r.out
        assert tried(project, "pull/3", "--post", "--repo", "someone/ROCmFPX", "--api", github.api).code == 0
        assert len(github.comments[("someone/ROCmFPX", 3)]) == 1  # updated in place


def test_a_commit_that_does_not_build_is_posted_as_an_error(project: Project, try_fork_: TryFork) -> None:
    broken = try_fork_.fork.builder.commit("server: a typo", {SERVER: "int main( {\n"}, ref="refs/pull/4/head", parents=[try_fork_.fork.f0])
    before = state(project)
    r = tried(project, "pull/4", "--post", "--dry-run", "--repo", "someone/ROCmFPX")
    assert r.code == 6, r.out + r.err  # CommandFailed: the compile's own exit, named
    assert r.err.splitlines() == ["onebit-ci: error: build (cmake --build) exited with status 1"]
    assert '"state": "error"' in r.out
    assert f"{post.API}/repos/someone/ROCmFPX/statuses/{broken}" in r.out
    assert f"| {try_fork.BUILD_ROW} | **ERROR** |" in r.out.replace("\\n", "\n")
    assert state(project) == before


def test_posting_flags_without_post_are_refused_before_anything_runs(project: Project) -> None:
    r = project.ci("try", "pull/3", "--dry-run", "--pr", "3", "--profile", "cpu")
    assert r.code == 2
    assert try_fork.POST_FLAGS.format(flags="--dry-run, --pr") in r.err
    assert not (project.root / "build" / "try").exists()


def test_without_a_mount_namespace_a_try_refuses_before_anything_is_fetched(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for a machine without user namespaces (a container that forbids them): can_unshare says no."""
    monkeypatch.setattr(try_fork, "can_unshare", lambda: False)
    r = tried(project, "pull/3")
    assert r.code == 5
    assert try_fork.NO_NAMESPACE in r.err
    assert not (project.root / "build" / "try").exists()
