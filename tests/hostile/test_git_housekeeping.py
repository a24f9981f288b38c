"""git's own housekeeping never outlives the git command this tool runs: ``git gc --auto`` (which commit, am, fetch and
merge start once enough loose objects pile up) runs in the foreground, not detached (gc.autoDetach, default true:
it forks, the git command exits, and a ``git gc`` is left running in the fork store after the tool's command)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pygit2

from ci.git import Git


def blob_starting(prefix: str, count: int) -> list[bytes]:
    """``count`` blob contents whose object names start with ``prefix`` (git gc --auto samples objects/17/)."""
    found: list[bytes] = []
    i = 0
    while len(found) < count:
        data = f"loose {i}\n".encode()
        if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest().startswith(prefix):
            found.append(data)
        i += 1
    return found


def test_every_git_command_line_runs_auto_gc_in_the_foreground(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "store.git"), bare=True)
    done = Git(Path(repo.path)).run("rev-parse", "--git-dir")
    settings = [done.argv[i + 1] for i in range(1, done.argv.index("rev-parse")) if done.argv[i] == "-c"]
    assert {"gc.autoDetach=false", "maintenance.autoDetach=false"} <= set(settings)


def test_an_automatic_gc_is_over_when_the_git_command_is(tmp_path: Path) -> None:
    """Two loose objects in objects/17 with gc.auto=1 are enough for ``git gc --auto`` to run: it says it does so in
    the foreground (detached, it said "in background", and its process outlived the command)."""
    repo = pygit2.init_repository(str(tmp_path / "store.git"), bare=True)
    repo.config["gc.auto"] = "1"
    for data in blob_starting("17", 2):
        repo.create_blob(data)
    done = Git(Path(repo.path)).run("gc", "--auto")
    assert "Auto packing the repository for optimum performance." in done.output
    assert "in background" not in done.output
