"""The series against one commit: which patches apply, which are already upstream, which conflict.

Each patch goes, in order, through ``git apply --cached`` on a scratch index of the fork store at that commit
(git's own offset search, all or nothing per patch), so the result of the whole series, and the tree it makes,
are known before the checkout is touched. A patch that does not apply is already upstream when it applies in
reverse (``git apply -R --check``) or when its ``git patch-id`` equals that of a commit in ``since..base``;
otherwise it conflicts, named with file and hunk.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from ci.git import Git, apply_cached, patch_id, range_patch_ids
from ci.source.series import Series

# Messages, shared with the tests that match on them (tests/support/messages.py)
VERDICT = "{patch}: {fate}"
VERDICT_DETAILED = "{patch}: {fate} ({detail})"
IN_THE_TREE = "its change is already in the tree"
SAME_CHANGE = "same change as {commit}"
NOT_APPLYING = "patches/{verdict}"


class Fate(Enum):
    APPLIES = "applies"
    UPSTREAM = "already upstream"
    CONFLICTS = "conflicts"


@dataclass(frozen=True)
class PatchVerdict:
    patch: str
    fate: Fate
    detail: str = ""  # for a conflict: the file and the hunk; for upstream: how it was recognised; else offsets

    def line(self) -> str:
        if self.detail:
            return VERDICT_DETAILED.format(patch=self.patch, fate=self.fate.value, detail=self.detail)
        return VERDICT.format(patch=self.patch, fate=self.fate.value)


@dataclass(frozen=True)
class SeriesPlan:
    """The series against one base commit: each patch's fate and the tree of base + the applicable patches."""

    base: str
    digest: str
    verdicts: tuple[PatchVerdict, ...]
    tree: str  # base tree + every patch that applies, in order

    @property
    def conflicts(self) -> tuple[PatchVerdict, ...]:
        return tuple(v for v in self.verdicts if v.fate is Fate.CONFLICTS)

    @property
    def upstreamed(self) -> tuple[PatchVerdict, ...]:
        return tuple(v for v in self.verdicts if v.fate is Fate.UPSTREAM)

    @property
    def clean(self) -> bool:
        return all(v.fate is Fate.APPLIES for v in self.verdicts)

    def lines(self) -> list[str]:
        return [v.line() for v in self.verdicts]

    def not_applying(self) -> str:
        """Each patch that does not apply as :data:`NOT_APPLYING`, joined by "; "."""
        return "; ".join(NOT_APPLYING.format(verdict=v.line()) for v in self.verdicts if v.fate is not Fate.APPLIES)


def classify(gitdir: Path, base: str, series: Series, since: str | None = None) -> SeriesPlan:
    """Each patch in order against ``base`` + the patches before it that apply."""
    with tempfile.TemporaryDirectory(prefix="onebit-series-") as tmp:
        scratch = Path(tmp)
        git = Git(gitdir, index=scratch / "index")
        git.run("read-tree", base)
        range_ids: dict[str, str] | None = None
        verdicts: list[PatchVerdict] = []
        for patch in series.patches:
            applied = apply_cached(git, patch.path)
            if applied.ok:
                verdicts.append(PatchVerdict(patch.name, Fate.APPLIES, "; ".join(applied.offsets)))
                continue
            if apply_cached(git, patch.path, reverse=True, check_only=True).ok:
                verdicts.append(PatchVerdict(patch.name, Fate.UPSTREAM, IN_THE_TREE))
                continue
            if since:
                if range_ids is None:  # only when a patch neither applies nor reverses: the log of a range is slow
                    range_ids = range_patch_ids(git, since, base, scratch)
                pid = patch_id(git, patch.path)
                if pid is not None and pid in range_ids:
                    verdicts.append(PatchVerdict(patch.name, Fate.UPSTREAM, SAME_CHANGE.format(commit=range_ids[pid])))
                    continue
            verdicts.append(PatchVerdict(patch.name, Fate.CONFLICTS, applied.error))
        tree = git.write_tree()
    return SeriesPlan(base, series.digest, tuple(verdicts), tree)
