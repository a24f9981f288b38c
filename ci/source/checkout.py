"""The submodule's working tree on disk: attaching it to the fork store, its HEAD, the tree it holds.

The layout is the one ``git submodule update`` makes: ``<workdir>/.git`` is a file naming the store (the
submodule's git dir), whose ``core.worktree`` points back, both relative. Paths a build never needs
(``checkout.omit`` in pins.yaml: the fork's ``models/`` and ``docs/``) are left out with git's own sparse
checkout, so git marks them skip-worktree and sees them as present, not deleted.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ci.errors import Refused
from ci.git import Git


def attach(gitdir: Path, workdir: Path, omit: tuple[str, ...]) -> Git:
    """Make ``workdir`` the store's work tree; it must be empty of anything but what the store will check out."""
    workdir.mkdir(parents=True, exist_ok=True)
    leftovers = sorted(p.name for p in workdir.iterdir() if p.name != ".git")
    if leftovers:
        raise Refused(f"{workdir}: not empty ({', '.join(leftovers[:5])}); move those files away first")
    gitdir = gitdir.resolve()
    bare = Git(gitdir)
    bare.run("config", "core.bare", "false")
    bare.run("config", "core.worktree", os.path.relpath(workdir.resolve(), gitdir))
    (workdir / ".git").write_text(f"gitdir: {os.path.relpath(gitdir, workdir.resolve())}\n")
    git = Git(gitdir, workdir)
    set_sparse(git, omit)
    return git


def set_sparse(git: Git, omit: tuple[str, ...]) -> None:
    """Leave ``omit`` out of the work tree (a non-cone sparse checkout); an empty ``omit`` turns it off."""
    info = git.gitdir / "info"
    info.mkdir(exist_ok=True)
    if omit:
        (info / "sparse-checkout").write_text("/*\n" + "".join(f"!/{o}\n" for o in omit))
    git.run("config", "core.sparseCheckout", "true" if omit else "false")
    git.run("config", "core.sparseCheckoutCone", "false")


def worktree_tree(git: Git) -> str:
    """The tree the work tree holds now (tracked and untracked files, ignored ones aside), written to the store.

    ``git add -A`` on a copy of the index, so the real index is untouched; its stat data makes this quick.
    """
    with tempfile.TemporaryDirectory(prefix="onebit-worktree-") as tmp:
        index = Path(tmp) / "index"
        real = git.index or git.gitdir / "index"
        if real.is_file():
            shutil.copyfile(real, index)
        scratch = Git(git.gitdir, git.worktree, index)
        scratch.run("add", "-A", "--ignore-errors", "--", ".")
        return scratch.write_tree()
