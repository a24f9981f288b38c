"""A build's identity and its record: the build key, and ``build.json`` with every binary's sha256.

The key covers what decides the binaries: the pin, the patch series, the profile's flags (local and one-off ones
included), the toolchain, build type and targets; its configure part says whether CMake must run again. Each
artifact keeps its stat data beside its sha256, as git's index does, so a no-op build reads no binary; ship hashes
every one again. Binaries and the libraries they load from the build are one unit (:func:`link_closure`, read by
serve.elf from the ELF files as ld.so would).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ci.errors import ConfigError, Refused
from ci.files import sha256_file, write_atomic
from ci.schema import load_json
from serve import elf

MANIFEST = "build.json"
SCHEMA = 4
# schema 1 had no stat data, 2 no ctime: their artifacts are hashed once more; 3 recorded every lib*.so in bin/ by
# its file name, not what the binaries load (no ``loads``): build again to record it
READABLE = (1, 2, 3, 4)

# Messages, shared with the tests that match on them (tests/support/messages.py)
IS_MISSING = "is missing"
DIFFERS = "differs from its recorded sha256"
MOVED_WHILE_HASHED = "changed while it was hashed"
NO_SUCH_BINARY = "the {profile} build has no {name}; add it to pins.yaml build.targets and build again"
UNSAFE_SEARCH_PATH = (
    "{file}: {problem}; a binary of the build finds its libraries in the build alone "
    "(link with RUNPATH $ORIGIN alone: -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH=$ORIGIN, as every profile does)"
)
STRAY_LIBRARY = (
    "{file}: no binary of the build loads it, and ggml opens every libggml-*.so beside its binaries; "
    "remove it (a build's binaries and the libraries they load are one unit)"
)
NOT_A_BINARY = "{file}: {problem}"
STRAY_PATTERN = "libggml-*.so"  # what ggml's backend loader opens beside the program (ggml-backend-reg.cpp)


@dataclass(frozen=True)
class BuildKey:
    configure: str
    full: str
    parts: tuple[tuple[str, str], ...]

    @property
    def short(self) -> str:
        return self.full[:12]


def build_key(
    profile: str,
    flags: Sequence[str],
    toolchain: Mapping[str, str],
    build_type: str,
    pin: str,
    series_digest: str,
    targets: Sequence[str],
    ggml_dirty: bool = False,
) -> BuildKey:
    """The pin and whether the series changes ggml/ are in the configure part: ggml's CMakeLists bakes
    ``git rev-parse --short HEAD`` and ``-dirty`` (``git diff-index HEAD -- ggml``) into the binaries when it is
    configured, and test-backend-ops reports that string as build_commit."""
    configure_parts = {"profile": profile, "flags": " ".join(flags), "build_type": build_type, "generator": "Ninja"}
    configure_parts |= {f"toolchain.{k}": v for k, v in sorted(toolchain.items())}
    configure_parts |= {"pin": pin, "ggml_dirty": "yes" if ggml_dirty else "no"}
    configure = _digest(configure_parts)
    parts = {**configure_parts, "patches": series_digest, "targets": " ".join(targets)}
    return BuildKey(configure=configure, full=_digest({"configure": configure, **parts}), parts=tuple(parts.items()))


def _digest(parts: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(parts), sort_keys=True).encode()).hexdigest()


# -- artifacts --------------------------------------------------------------------------------------------------


Stamp = tuple[int, int, int, int]  # (size, mtime_ns, inode, ctime_ns): a write, or a rename over it, moves one
INODE = 2  # a Stamp's inode


def stat_stamp(st: os.stat_result) -> Stamp:
    """What says a file is unchanged without reading it: size, mtime, inode and ctime (the one a user cannot set)."""
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def stamp_of(path: Path, follow: bool = True) -> Stamp | None:
    """``path``'s :data:`Stamp` now (of the link itself with ``follow`` false), None when it is gone."""
    try:
        return stat_stamp(os.stat(path, follow_symlinks=follow))
    except OSError:
        return None


def _written_back(path: Path) -> None:
    """``path``'s dirty pages written back (fsync), which write-protects them in every mapping: a later store through a
    mapping made writable earlier then faults, and the fault moves the file's ctime (on a disk filesystem; tmpfs
    keeps no time for stores through a mapping)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class SealedFile:
    """A file of the build as it was hashed: its path, its stamp then, and its real path then."""

    path: Path
    stamp: Stamp
    real: str


@dataclass(frozen=True)
class Sealed:
    """A build's binaries and libraries as hashed now, whatever build.json's stat data says (a user can write that
    file), by artifact name, with the stamp each had while it was hashed: a file changed since, even one put back as
    it was, has another inode or ctime, which no user can set back."""

    files: Mapping[str, SealedFile]
    folders: Mapping[Path, Stamp] = field(default_factory=dict)  # the folders inside the build that hold them

    def moved(self) -> list[str]:
        """The artifacts whose stamp is not the one they had when hashed, and the folders holding them that were
        renamed, replaced or written since (a folder swapped for a link and put back moves its ctime)."""
        files = [name for name, f in self.files.items() if stamp_of(f.path) != f.stamp]
        return files + [f"{folder.name}/" for folder, stamp in self.folders.items() if stamp_of(folder, follow=False) != stamp]

    def inodes(self) -> dict[str, tuple[str, int]]:
        """Each artifact's real path and inode when hashed, by its path and by that real path: the file a program
        started by a build path, or a mapping at a build path, must be (both taken at the seal, not when judged)."""
        out = {os.path.normpath(os.path.abspath(f.path)): (f.real, f.stamp[INODE]) for f in self.files.values()}
        return out | {f.real: (f.real, f.stamp[INODE]) for f in self.files.values()}


@dataclass(frozen=True)
class Artifact:
    path: str  # relative to the manifest's directory
    sha256: str
    stat: tuple[int, ...] = (0, 0, 0, 0)  # (size, mtime_ns, inode, ctime_ns) when the sha256 was taken

    @classmethod
    def of(cls, root: Path, path: Path) -> Artifact:
        return cls(os.path.relpath(path, root), sha256_file(path), stat_stamp(os.stat(path)))

    def check(self, root: Path) -> str | None:
        """None when the file is as recorded; else what is wrong. Hashes only when the stat data moved."""
        path = root / self.path
        try:
            st = path.stat()
        except OSError:
            return IS_MISSING
        if not path.is_file():
            return IS_MISSING
        if stat_stamp(st) == self.stat:
            return None
        return None if sha256_file(path) == self.sha256 else DIFFERS

    def reprove(self, root: Path) -> str | None:
        """As :meth:`check`, but the file is hashed whatever its stat data says (ship: nothing is taken on trust)."""
        path = root / self.path
        if not path.is_file():
            return IS_MISSING
        return None if sha256_file(path) == self.sha256 else DIFFERS

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "stat": list(self.stat)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Artifact:
        stat = [int(x) for x in (data.get("stat") or ())]
        return cls(str(data["path"]), str(data["sha256"]), tuple(stat) if len(stat) == 4 else (0, 0, 0, 0))


@dataclass(frozen=True)
class LinkClosure:
    """The libraries the binaries load from the build, by the name ld.so looks for, and which binary loads which."""

    libraries: dict[str, Artifact]
    loads: dict[str, tuple[str, ...]]


def link_closure(build_dir: Path, binaries: Mapping[str, Path]) -> LinkClosure:
    """Every library ``binaries`` load from ``build_dir``, each hashed where ld.so finds it (a link's target's bytes
    under the link's name). Refused, naming the file: a search path reaching the current directory or outside the
    build (an empty, ``.``, relative or ``$ORIGIN/..``-escaping entry; a directory anyone may write), a library named
    by a path, a ``libggml-*.so`` beside a binary that no binary loads."""
    libraries: dict[str, Artifact] = {}
    loads: dict[str, tuple[str, ...]] = {}
    for name, path in binaries.items():
        try:
            found = elf.closure(path, build_dir)
        except (elf.NotElf, OSError) as exc:
            raise Refused(NOT_A_BINARY.format(file=_shown(path, build_dir), problem=exc)) from None
        for file, problem in found.problems:
            where = path if file == path.name else next(lib.path for lib in found.libraries if lib.name == file)
            raise Refused(UNSAFE_SEARCH_PATH.format(file=_shown(where, build_dir), problem=problem))
        loads[name] = found.names
        for lib in found.libraries:
            if lib.name not in libraries:
                libraries[lib.name] = Artifact.of(build_dir, lib.path)
    stray = strays(build_dir, binaries.values(), libraries.values())
    if stray:
        raise Refused(STRAY_LIBRARY.format(file=_shown(stray[0], build_dir)))
    return LinkClosure(libraries, loads)


def strays(build_dir: Path, binaries: Iterable[Path], libraries: Iterable[Artifact]) -> list[Path]:
    """The ``libggml-*.so`` files beside the binaries that are not, nor link to, a library they load."""
    loaded = {os.path.realpath(build_dir / art.path) for art in libraries}
    out: list[Path] = []
    for directory in sorted({p.parent for p in binaries}):
        for candidate in sorted(directory.glob(STRAY_PATTERN)):
            if os.path.realpath(candidate) not in loaded:
                out.append(candidate)
    return out


def _shown(path: Path, build_dir: Path) -> str:
    return os.path.relpath(path, build_dir.parent) if not os.path.relpath(path, build_dir.parent).startswith("..") else str(path)


@dataclass(frozen=True)
class Manifest:
    key: str
    configure_key: str
    profile: str
    device: str
    pin: dict[str, str]
    patches: dict[str, Any]
    flags: tuple[str, ...]
    toolchain: dict[str, str]
    build_type: str
    targets: tuple[str, ...]
    binaries: dict[str, Artifact]
    libraries: dict[str, Artifact] = field(default_factory=dict)
    loads: dict[str, tuple[str, ...]] = field(default_factory=dict)  # binary -> the libraries it loads (by name)
    key_parts: dict[str, str] = field(default_factory=dict)
    local_flags: tuple[str, ...] = ()  # the machine's own (ONEBIT_CMAKE_ARGS, the local flags file)
    one_off_flags: tuple[str, ...] = ()  # given to this build alone with -D
    seconds: float = 0.0
    built_at: str = ""
    host: str = ""
    ccache: str | None = None
    ccache_stats: dict[str, Any] | None = None  # the build's own compiles: hits, misses, uncacheable, hit_rate
    schema: int = SCHEMA  # as read: below 4, ``libraries`` is not what the binaries load, and ``loads`` is empty

    @property
    def pin_commit(self) -> str:
        return self.pin["commit"]

    @property
    def series_digest(self) -> str:
        return str(self.patches["digest"])

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "key": self.key,
            "configure_key": self.configure_key,
            "profile": self.profile,
            "device": self.device,
            "pin": self.pin,
            "patches": self.patches,
            "flags": list(self.flags),
            "local_flags": list(self.local_flags),
            "one_off_flags": list(self.one_off_flags),
            "toolchain": self.toolchain,
            "build_type": self.build_type,
            "targets": list(self.targets),
            "binaries": {k: a.to_json() for k, a in self.binaries.items()},
            "libraries": {k: a.to_json() for k, a in self.libraries.items()},
            "loads": {k: list(v) for k, v in self.loads.items()},
            "key_parts": self.key_parts,
            "seconds": round(self.seconds, 1),
            "built_at": self.built_at,
            "host": self.host,
            "ccache": self.ccache,
            "ccache_stats": self.ccache_stats,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        def artifacts(d: Mapping[str, Any]) -> dict[str, Artifact]:
            return {k: Artifact.from_json(v) for k, v in d.items()}

        return cls(
            key=data["key"],
            configure_key=data["configure_key"],
            profile=data["profile"],
            device=data["device"],
            pin=dict(data["pin"]),
            patches=dict(data["patches"]),
            flags=tuple(data["flags"]),
            local_flags=tuple(data.get("local_flags", ())),
            one_off_flags=tuple(data.get("one_off_flags", ())),
            toolchain=dict(data["toolchain"]),
            build_type=data["build_type"],
            targets=tuple(data["targets"]),
            binaries=artifacts(data["binaries"]),
            libraries=artifacts(data.get("libraries", {})),
            loads={str(k): tuple(str(n) for n in v) for k, v in (data.get("loads") or {}).items()},
            key_parts=dict(data.get("key_parts", {})),
            seconds=float(data.get("seconds", 0.0)),
            built_at=data.get("built_at", ""),
            host=data.get("host", ""),
            ccache=data.get("ccache"),
            ccache_stats=data.get("ccache_stats") if isinstance(data.get("ccache_stats"), dict) else None,
            schema=int(data.get("schema", SCHEMA)),
        )

    def binary(self, manifest_dir: Path, name: str) -> Path:
        try:
            return manifest_dir / self.binaries[name].path
        except KeyError:
            raise Refused(NO_SUCH_BINARY.format(profile=self.profile, name=name)) from None

    @property
    def digest(self) -> str:
        """The sha256 of what this manifest vouches for: the key and every binary's and library's sha256. Each gate
        record carries it (``manifest_sha256``), and ship compares it with the build.json it reads: a binary swapped
        and its sha256 rewritten in build.json no longer matches the records."""
        body: dict[str, Any] = {
            "key": self.key,
            "binaries": {k: a.sha256 for k, a in sorted(self.binaries.items())},
            "libraries": {k: a.sha256 for k, a in sorted(self.libraries.items())},
        }
        if self.loads:  # which binary loads which library: a record judged the unit, not the files apart
            body["loads"] = {k: list(v) for k, v in sorted(self.loads.items())}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def strays(self, manifest_dir: Path) -> list[Path]:
        """The ``libggml-*.so`` files beside the binaries now that none of them loads (:func:`strays`): what ggml
        would open in a gate that this manifest does not vouch for."""
        return strays(manifest_dir, [manifest_dir / a.path for a in self.binaries.values()], self.libraries.values())

    def reproved(self, manifest_dir: Path) -> list[tuple[str, str]]:
        """(artifact, what is wrong) for every binary and library whose bytes are not as recorded, each hashed now."""
        out = []
        for name, art in {**self.binaries, **self.libraries}.items():
            wrong = art.reprove(manifest_dir)
            if wrong:
                out.append((name, wrong))
        return out

    def sealed(self, manifest_dir: Path) -> tuple[Sealed, list[tuple[str, str]]]:
        """Every binary and library hashed now with its stamp (:class:`Sealed`), and (artifact, what is wrong) for each
        whose bytes are not as recorded or that changed while it was read."""
        files: dict[str, SealedFile] = {}
        wrong: list[tuple[str, str]] = []
        for name, art in {**self.binaries, **self.libraries}.items():
            path = manifest_dir / art.path
            _written_back(path)
            before = stamp_of(path)
            problem = IS_MISSING if before is None or not path.is_file() else art.reprove(manifest_dir)
            if problem is None and stamp_of(path) != before:
                problem = MOVED_WHILE_HASHED
            if problem:
                wrong.append((name, problem))
            elif before is not None:
                files[name] = SealedFile(path, before, os.path.realpath(path))
        folders = {f: stamp_of(f, follow=False) for s in files.values() for f in s.path.parents if manifest_dir in f.parents}
        return Sealed(files, {f: s for f, s in folders.items() if s is not None}), wrong

    def problems(self, manifest_dir: Path) -> list[tuple[str, str]]:
        """(artifact, what is wrong) for every binary and library that is not as recorded."""
        out = []
        for name, art in {**self.binaries, **self.libraries}.items():
            wrong = art.check(manifest_dir)
            if wrong:
                out.append((name, wrong))
        return out

    def write(self, path: Path) -> None:
        write_atomic(path, json.dumps(self.to_json(), indent=2) + "\n")


def read_manifest(path: Path) -> Manifest | None:
    """The manifest at ``path``, None when there is none; a damaged one is reported, never trusted."""
    if not path.is_file():
        return None
    try:
        data = load_json(path)
        if not isinstance(data, dict) or data.get("schema") not in READABLE:
            raise ValueError(f"schema {data.get('schema') if isinstance(data, dict) else None}, expected {SCHEMA}")
        return Manifest.from_json(data)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise ConfigError(f"{path}: not a build manifest of this version ({exc}); build again (nox -s build) to replace it") from None
