"""ninja's view of a build directory: what it saw of the checkout, put back before each run; what it would still do
when the key says up to date; and what ccache did for its compiles.

Before each ninja run this tool starts, :func:`reconcile` puts back the time the directory's last run saw on each
file whose content is unchanged (:mod:`ci.source.view`) and writes the view the run will see
(``.onebit-sources.json``, not in the key); :func:`seen` takes it again after. A ninja run this tool did not start
moves ``.ninja_log``: the view is then not trusted, and ninja decides by the times it finds.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci.command import run
from ci.files import write_atomic
from ci.source.view import CheckoutView, Restoration, restore, scan, store_of
from ci.words import count

SOURCES = ".onebit-sources.json"
NINJA_LOG = ".ninja_log"
CCACHE_LOG = ".onebit-ccache.log"  # ccache's stats log (CCACHE_STATSLOG) of the last ninja run
CCACHE_HITS = ("direct_cache_hit", "preprocessed_cache_hit")
CCACHE_MISS = "cache_miss"
LISTED = 3  # files named in a line
_EXPLAIN_RE = re.compile(r"^ninja explain: (.*)$", re.MULTILINE)
_STEP_RE = re.compile(r"^\[\d+/(\d+)\] (.*)$", re.MULTILINE)

# Messages, shared with the tests that match on them (tests/support/messages.py)
PUT_BACK = "build: {files} of {checkout} as {build} last saw them (content unchanged): their times put back, so ninja rebuilds what changed in content"
INDEX_PUT_BACK = "build: the fork's git index rewritten with HEAD and the tree as {build} saw them: its time put back, so CMake does not run again for it"
TOUCHED = "build: {files} ({listing}) differ from what {build} saw but looked older: given the current time, so ninja rebuilds them"
KEPT_NEW = "build: {files} ({listing}) kept their new time: another build directory saw other content there"
FOREIGN = (
    "build: {build} was built by a ninja run this tool did not start, or one cut off ({log} moved since {record}): "
    "no times put back; ninja decides by the times it finds"
)
NINJA_WOULD_RUN = "ninja would still run {steps} ({why})"
NINJA_REGENERATES = "CMake's regeneration first: {why}"
NINJA_FAILED_DRY = "ninja -n failed: {tail}"
CCACHE_LINE = "build: ccache: {hits} of {cacheable} compiles from the cache ({rate}), {uncacheable} not cacheable"
CCACHE_UNUSED = (
    "build: ccache: found at {ccache}, but none of this run's {compiles} compiles went through it: {build} was "
    "configured without it; remove {cache} to configure again with it"
)


@dataclass(frozen=True)
class SourcesRecord:
    """The view of the checkout that the build directory's ninja last saw, and its log's stamp then."""

    view: CheckoutView
    ninja_log: tuple[int, int] | None  # (size, mtime_ns) of .ninja_log when written; None: there was none

    @classmethod
    def read(cls, build_dir: Path) -> SourcesRecord | None:
        try:
            data = json.loads((build_dir / SOURCES).read_bytes())
            stamp = data.get("ninja_log")
            return cls(CheckoutView.from_json(data["view"]), (int(stamp[0]), int(stamp[1])) if stamp else None)
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None  # none, or damaged: nothing is put back, and the next run writes a fresh one

    @staticmethod
    def write(build_dir: Path, view: CheckoutView) -> None:
        stamp = log_stamp(build_dir)
        body = {"view": view.to_json(), "ninja_log": list(stamp) if stamp else None}
        write_atomic(build_dir / SOURCES, json.dumps(body, separators=(",", ":")) + "\n")


def log_stamp(build_dir: Path) -> tuple[int, int] | None:
    try:
        st = (build_dir / NINJA_LOG).stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def others_of(build_dir: Path) -> list[CheckoutView]:
    """The views of the other build directories beside this one (``build/<profile>/``): what they saw limits how old a
    time may be put back (:func:`ci.source.view.restore`)."""
    found = []
    try:
        siblings = sorted(p for p in build_dir.parent.iterdir() if p.is_dir() and p.resolve() != build_dir.resolve())
    except OSError:
        return []
    for sibling in siblings:
        record = SourcesRecord.read(sibling)
        if record is not None:
            found.append(record.view)
    return found


@dataclass(frozen=True)
class Reconciled:
    """What was done to the checkout before a ninja run."""

    build_dir: Path
    restoration: Restoration | None  # None: no view to go by (none yet, or not trusted)
    foreign: bool = False

    def lines(self, shown: Callable[[Path], str]) -> list[str]:
        build = shown(self.build_dir)
        if self.foreign:
            return [FOREIGN.format(build=build, log=NINJA_LOG, record=SOURCES)]
        r = self.restoration
        if r is None:
            return []
        out = []
        if r.put_back:
            out.append(PUT_BACK.format(files=count(len(r.put_back), "file"), checkout="the checkout", build=build))
        if r.index_put_back:
            out.append(INDEX_PUT_BACK.format(build=build))
        if r.touched:
            out.append(TOUCHED.format(files=count(len(r.touched), "file"), listing=", ".join(r.touched[:LISTED]), build=build))
        if r.kept_new:
            out.append(KEPT_NEW.format(files=count(len(r.kept_new), "file"), listing=", ".join(r.kept_new[:LISTED])))
        return out


def _skip(build_dir: Path, workdir: Path) -> Path | None:
    """The build directory, when it lies inside the checkout (its files are the build's, not the source's)."""
    inside = os.path.realpath(build_dir).startswith(os.path.realpath(workdir) + os.sep)
    return build_dir if inside else None


def reconcile(build_dir: Path, workdir: Path, *, copy_of: tuple[Path, Path] | None = None) -> Reconciled:
    """Before a ninja run on ``build_dir``: put back the times of what its last run saw (unless that view is not
    trusted), and write the view the run will see. ``copy_of``: ``workdir`` and ``build_dir`` are copies (the
    self-test's) of this checkout and build directory, bind-mounted over them for the run: the checkout's fork store
    is the one CMake will read, git's index does not describe the copy, and the original's neighbours limit the
    times."""
    gitdir = store_of(copy_of[0] if copy_of else workdir)
    skip = _skip(build_dir, workdir)
    record = SourcesRecord.read(build_dir)
    if record is None or record.ninja_log != log_stamp(build_dir):
        SourcesRecord.write(build_dir, scan(workdir, record.view if record else None, gitdir=gitdir, skip=skip))
        return Reconciled(build_dir, None, foreign=record is not None)
    others = others_of(copy_of[1] if copy_of else build_dir)
    restoration = restore(workdir, record.view, gitdir=gitdir, others=others, skip=skip, refresh_index=copy_of is None)
    if (restoration.view.files, restoration.view.index) != (record.view.files, record.view.index):
        # written only when something moved: a no-op keeps the view as taken (no ninja ran since it, so no object is
        # newer than it says) and writes nothing
        SourcesRecord.write(build_dir, restoration.view)
    return Reconciled(build_dir, restoration)


def seen(build_dir: Path, workdir: Path) -> None:
    """After a ninja run on ``build_dir`` (done or failed, not cut off): the view it saw, for the next run."""
    record = SourcesRecord.read(build_dir)
    gitdir = store_of(workdir)
    SourcesRecord.write(build_dir, scan(workdir, record.view if record else None, gitdir=gitdir, skip=_skip(build_dir, workdir)))


# -- ninja -n: does ninja agree that nothing is to do? ----------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """What ninja would still run: how many steps, and why (its own ``-d explain``)."""

    steps: int
    why: str
    regenerate: bool = False

    def reason(self) -> str:
        if self.regenerate:
            return NINJA_REGENERATES.format(why=self.why)
        return NINJA_WOULD_RUN.format(steps=count(self.steps, "step"), why=self.why)


def pending(ninja: str, build_dir: Path, targets: Sequence[str], env: Mapping[str, str], root: Path | None = None) -> Pending | None:
    """``ninja -n -d explain`` on the targets: None when it has nothing to do. A dry run writes nothing (no log, no
    object)."""
    done = run([ninja, "-C", str(build_dir), "-n", "-d", "explain", *targets], env=dict(env), check=False, quiet=True, what="ninja -n")
    text = done.output
    if done.returncode != 0:
        tail = " ".join(text.strip().splitlines()[-2:])[:300]
        return Pending(0, NINJA_FAILED_DRY.format(tail=tail))
    steps = _STEP_RE.findall(text)
    if not steps:
        return None
    regenerate = "build.ninja" in text and any("Re-running CMake" in what for _, what in steps)
    return Pending(int(steps[0][0]), _first_reason(text, build_dir, root), regenerate)


def _first_reason(text: str, build_dir: Path, root: Path | None) -> str:
    """The explain line that names an input: the one that says why (the others say what depends on it)."""
    lines = _EXPLAIN_RE.findall(text)
    best = next((ln for ln in lines if "older than most recent input" in ln), None) or next((ln for ln in lines if "is dirty" not in ln), None) or (lines[0] if lines else "ninja gave no reason")
    for base in (str(build_dir) + os.sep, (str(root) + os.sep) if root else None):
        if base:
            best = best.replace(base, "")
    return best


# -- ccache ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CcacheStats:
    """What ccache did for one ninja run's compiles, from its stats log: a compile either came from the cache, was
    compiled and cached (a miss), or could not be cached (a link, a preprocessing call, ...)."""

    hits: int
    misses: int
    uncacheable: int

    @property
    def cacheable(self) -> int:
        return self.hits + self.misses

    @property
    def rate(self) -> float | None:
        return self.hits / self.cacheable if self.cacheable else None

    def to_json(self) -> dict[str, Any]:
        rate = self.rate
        return {"hits": self.hits, "misses": self.misses, "uncacheable": self.uncacheable, "hit_rate": None if rate is None else round(rate, 4)}

    def line(self) -> str:
        rate = self.rate
        shown = "no cacheable compile" if rate is None else f"{100 * rate:.1f}%"
        return CCACHE_LINE.format(hits=self.hits, cacheable=self.cacheable, rate=shown, uncacheable=self.uncacheable)


def ccache_stats(log: Path) -> CcacheStats | None:
    """The counts in ccache's stats log (``# FILE`` then a counter a line, one block a call); None when there is no
    log (ccache not used, or older than 4.4, which cannot write one)."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    calls: list[set[str]] = []
    for line in text.splitlines():
        if line.startswith("# "):
            calls.append(set())
        elif calls and line.strip():
            calls[-1].add(line.strip())
    hits = sum(1 for c in calls if c & set(CCACHE_HITS))
    misses = sum(1 for c in calls if not c & set(CCACHE_HITS) and CCACHE_MISS in c)
    return CcacheStats(hits, misses, len(calls) - hits - misses)
