"""A fork and an onebit-ci project repository, both real git repositories in a tmp dir."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import pygit2

from ci.cli import main
from tests.support.gitrepo import RepoBuilder, Symlink

FORK_URL = "https://example.invalid/1bit-MONSTER/ROCmFPX.git"

DELTA_C = "".join(f"static int delta_{i}(int x) {{ return x + {i}; }}\n" for i in range(12))
DELTA_AT_C1 = DELTA_C.replace("x + 3;", "x + 33;")  # ggml/src/delta.c from c1 to c4 (c1 is the usual pin)


@dataclass(frozen=True)
class Fork:
    path: Path
    c0: str
    c1: str
    c2: str
    s1: str  # on branch side, merged into main by c3
    c3: str
    c4: str
    c5: str
    c6: str  # changes again the line c5 changed
    w1: str  # only on branch wip
    p1: str  # only on refs/pull/7/head
    ambiguous: tuple[str, str]  # two commits of branch many sharing their first 4 hex digits
    builder: RepoBuilder

    def subject(self, sha: str) -> str:
        commit = self.builder.repo[sha]
        assert isinstance(commit, pygit2.Commit)
        return commit.message.splitlines()[0]


def make_fork(path: Path) -> Fork:
    b = RepoBuilder(path, bare=True)
    c0 = b.commit(
        "Initial commit",
        {
            "README.md": "fork\n",
            "CMakeLists.txt": "cmake_minimum_required(VERSION 3.14)\n",
            "ggml/src/delta.c": DELTA_C,
            "models/ggml-vocab-tiny.gguf": b"GGUF\x03\x00\x00\x00",
            "docs/build.md": "# build\n",
            "tools/win.txt": b"first\r\nsecond\r\nthird\r\n",
            "ggml-link": Symlink(b"ggml"),
        },
    )
    c1 = b.commit("ggml: chunked delta-net prefill", {"ggml/src/delta.c": DELTA_AT_C1})
    b.tag("v1", c1)
    s1 = b.commit("side: add a helper", {"side.txt": "helper\n"}, branch="side", parents=[c1])
    c2 = b.commit("server: fix the slot reset", {"README.md": "fork\nserver\n"}, parents=[c1])
    c3 = b.commit("Merge branch 'side'", {"side.txt": "helper\n"}, parents=[c2, s1])
    c4 = b.commit("common: parse more flags", {"common.c": "int flags;\n"})
    w1 = b.commit("wip: not merged", {"wip.txt": "wip\n"}, branch="wip", parents=[c4])
    c5 = b.commit("ggml: micro-batch offset of layer inputs", {"ggml/src/delta.c": DELTA_AT_C1.replace("x + 7;", "x + 77;")})
    c6 = b.commit("ggml: retune the offset", {"ggml/src/delta.c": DELTA_AT_C1.replace("x + 7;", "x + 777;")})
    p1 = b.commit("pr: proposed change", {"pr.txt": "pr\n"}, ref="refs/pull/7/head", parents=[c5])
    seen: dict[str, str] = {}
    parent = c5
    ambiguous: tuple[str, str] | None = None
    for i in range(5000):
        parent = b.commit(f"many: commit {i}", {"many.txt": f"{i}\n"}, branch="many", parents=[parent])
        if parent[:4] in seen:
            ambiguous = (seen[parent[:4]], parent)
            break
        seen[parent[:4]] = parent
    assert ambiguous is not None
    return Fork(path, c0, c1, c2, s1, c3, c4, c5, c6, w1, p1, ambiguous, b)


PINS_TEMPLATE = """\
# What the 1bit engine runs: the ROCmFPX fork of llama.cpp, pinned to one commit of one branch.
fork:
  url: {url}
  branch: main
  commit: {commit}
  reference: "ROCmFPX#2"  # a name people use for it
  date: 2026-09-28        # the day it was pinned

submodule: third_party/llama.cpp-rocmfpx

checkout:
  omit: [models/, docs/]

expect:
  backend_ops:
    GATED_DELTA_NET: 54
"""

def pins_text(commit: str, url: str = FORK_URL, extra: str = "") -> str:
    return PINS_TEMPLATE.format(url=url, commit=commit) + extra


GITMODULES = """\
[submodule "third_party/llama.cpp-rocmfpx"]
\tpath = third_party/llama.cpp-rocmfpx
\turl = {url}
\tbranch = main
"""


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


@dataclass(frozen=True)
class Project:
    root: Path
    fork: Fork  # for projects pinned to another fixture fork (the build's), only its .path is used

    @property
    def repo(self) -> pygit2.Repository:
        return pygit2.Repository(str(self.root))

    @property
    def pins(self) -> Path:
        return self.root / "pins.yaml"

    @property
    def submodule(self) -> Path:
        return self.root / "third_party" / "llama.cpp-rocmfpx"

    def gitlink(self) -> str:
        index = self.repo.index
        return str(index["third_party/llama.cpp-rocmfpx"].id)

    def ci(self, *args: str) -> Result:
        """``python -m ci --root ROOT ARGS`` in this process."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["--root", str(self.root), *args])
        return Result(code, out.getvalue(), err.getvalue())

    def state(self) -> dict[str, bytes]:
        """The bytes a failed bump must leave exactly as they were."""
        files = {p: (self.root / p).read_bytes() for p in ("pins.yaml", ".gitmodules")}
        files[".git/index"] = (self.root / ".git" / "index").read_bytes()
        return files


def make_project(root: Path, fork: Fork, pinned: str, url: str = FORK_URL, pins_extra: str = "") -> Project:
    b = RepoBuilder(root)
    b.commit("onebit-ci", {
            "pins.yaml": pins_text(pinned, url, pins_extra),
            ".gitmodules": GITMODULES.format(url=url),
            ".gitignore": "/build/\n",
        })
    repo = b.repo
    repo.index.read_tree(repo.head.peel(pygit2.Tree))
    repo.index.add(pygit2.IndexEntry("third_party/llama.cpp-rocmfpx", pygit2.Oid(hex=pinned), pygit2.enums.FileMode.COMMIT))
    repo.index.write()
    tree = repo.index.write_tree()
    sig = pygit2.Signature("Fixture Author", "fixture@example.invalid", 1767225600, 0)
    repo.create_commit("HEAD", sig, sig, "pin the fork", tree, [repo.head.target])
    repo.checkout_head(strategy=pygit2.enums.CheckoutStrategy.FORCE)
    return Project(root, fork)
