"""Real git repositories for tests, written with pygit2 (deterministic: fixed authors and clocks)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pygit2

EPOCH = 1767225600  # 2026-01-01T00:00:00Z


def signature(tick: int) -> pygit2.Signature:
    return pygit2.Signature("Fixture Author", "fixture@example.invalid", EPOCH + 60 * tick, 0)


class Symlink(bytes):
    """A file value that is a symbolic link to its content."""


Files = Mapping[str, "bytes | str | None"]


class RepoBuilder:
    """Commits by file contents: each commit takes its first parent's files plus ``files`` (None deletes)."""

    def __init__(self, path: Path, *, bare: bool = False) -> None:
        self.repo = pygit2.init_repository(str(path), bare=bare, initial_head="main")
        self.tick = 0
        self._files: dict[str, dict[str, bytes]] = {}

    def commit(
        self,
        message: str,
        files: Files | None = None,
        *,
        branch: str = "main",
        parents: list[str] | None = None,
        ref: str | None = None,
    ) -> str:
        ref = ref or f"refs/heads/{branch}"
        if parents is None:
            parents = [str(self.repo.references[ref].target)] if ref in self.repo.references else []
        base = dict(self._files.get(parents[0], {})) if parents else {}
        for path, content in (files or {}).items():
            if content is None:
                base.pop(path, None)
            else:
                base[path] = content.encode() if isinstance(content, str) else content  # Symlink stays a Symlink
        tree = self._tree(base)
        self.tick += 1
        sig = signature(self.tick)
        oid = self.repo.create_commit(None, sig, sig, message, tree, [pygit2.Oid(hex=p) for p in parents])
        self.repo.references.create(ref, oid, force=True)
        self._files[str(oid)] = base
        return str(oid)

    def files_at(self, sha: str) -> dict[str, bytes]:
        return dict(self._files[sha])

    def _tree(self, files: Mapping[str, bytes]) -> pygit2.Oid:
        nested: dict[str, object] = {}
        for path, data in files.items():
            node = nested
            *dirs, name = path.split("/")
            for d in dirs:
                node = node.setdefault(d, {})  # type: ignore[assignment]
            node[name] = data
        return self._write(nested)

    def _write(self, node: Mapping[str, object]) -> pygit2.Oid:
        tb = self.repo.TreeBuilder()
        for name, value in sorted(node.items()):
            if isinstance(value, Symlink):
                tb.insert(name, self.repo.create_blob(bytes(value)), pygit2.enums.FileMode.LINK)
            elif isinstance(value, bytes):
                tb.insert(name, self.repo.create_blob(value), pygit2.enums.FileMode.BLOB)
            else:
                tb.insert(name, self._write(value), pygit2.enums.FileMode.TREE)  # type: ignore[arg-type]
        return tb.write()

    def tag(self, name: str, sha: str) -> None:
        self.repo.references.create(f"refs/tags/{name}", pygit2.Oid(hex=sha))
