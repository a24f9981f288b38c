"""Which shared libraries a program loads from its build, read from the ELF files as ``ld.so`` would find them.

Not through ``ldd``: it runs the loader, and answers by the caller's ``LD_LIBRARY_PATH`` and current directory, inputs
this must not trust. The search follows glibc's order (the DT_RPATH of a file and its loaders, or its DT_RUNPATH when
it has one; ``$ORIGIN`` its directory); what is not found in the build is the system's. :func:`search_path_problems`
names an entry that reaches outside what was built (the current directory, past the build, a directory anyone may
write).
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
_MAX_PHNUM = 4096
_MAX_DYNAMIC = 1 << 20  # bytes of a dynamic section: a real one holds a few hundred entries
_MAX_STRING = 1 << 16

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_ELF = "not an ELF file"
DAMAGED = "a damaged ELF file ({what})"
EMPTY_ENTRY = "{tag} {value!r} has an empty entry: ld.so reads it as the current directory"
RELATIVE_ENTRY = "{tag} {value!r} has the relative entry {entry!r}: ld.so reads it from the current directory"
OUTSIDE_BUILD = "{tag} {value!r} has {entry!r}, which leaves the build ({resolved})"
MACHINE_TOKEN = "{tag} {value!r} has {entry!r}: a token ld.so expands by machine, not a directory of the build"
WRITABLE_BY_OTHERS = "{tag} {value!r} has {entry!r}, a directory anyone may write"
NEEDS_A_PATH = "needs {name!r}: a library named by a path, which ld.so opens from the current directory"


class NotElf(ValueError):
    """A file that is not ELF, or whose headers are damaged; the message says which."""


@dataclass(frozen=True)
class Dynamic:
    """What ld.so reads from one file to load its libraries. ``rpath`` is None when the file has DT_RUNPATH
    (glibc then ignores DT_RPATH), as it is after :func:`read_dynamic`."""

    needed: tuple[str, ...] = ()
    rpath: tuple[str, ...] | None = None  # DT_RPATH split on ':'; None: absent
    runpath: tuple[str, ...] | None = None  # DT_RUNPATH split on ':'; None: absent
    soname: str | None = None
    raw_rpath: str | None = None
    raw_runpath: str | None = None


def _split(value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value.split(":"))


class _Reader:
    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.fh, self.size = fh, size

    def read(self, offset: int, n: int, what: str) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise NotElf(DAMAGED.format(what=f"{what} past the end of the file"))
        self.fh.seek(offset)
        data = self.fh.read(n)
        if len(data) != n:
            raise NotElf(DAMAGED.format(what=f"{what} cut short"))
        return data


def dynamic_of(fh: BinaryIO) -> Dynamic:
    """The dynamic section of the open ELF file ``fh``; an empty :class:`Dynamic` for a static one. Reads the
    headers it needs and nothing else (a HIP library is hundreds of MB of GPU code)."""
    size = os.fstat(fh.fileno()).st_size
    r = _Reader(fh, size)
    ident = r.read(0, 16, "the header") if size >= 16 else b""
    if len(ident) < 16 or ident[:4] != b"\x7fELF":
        raise NotElf(NOT_ELF)
    wide = {1: False, 2: True}.get(ident[4])
    order = {1: "<", 2: ">"}.get(ident[5])
    if wide is None or order is None:
        raise NotElf(DAMAGED.format(what=f"class {ident[4]}, data {ident[5]}"))
    if wide:
        phoff, phentsize, phnum = struct.unpack(order + "32xQ14xHH", r.read(0, 58, "the header"))
        ph_format, entry_format = order + "IIQQQQQQ", order + "qQ"
    else:
        phoff, phentsize, phnum = struct.unpack(order + "28xI10xHH", r.read(0, 46, "the header"))
        ph_format, entry_format = order + "IIIIIIII", order + "iI"
    if phnum > _MAX_PHNUM or (phnum and phentsize < struct.calcsize(ph_format)):
        raise NotElf(DAMAGED.format(what=f"{phnum} program headers of {phentsize} bytes"))
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None  # (offset, filesz)
    for i in range(phnum):
        fields = struct.unpack(ph_format, r.read(phoff + i * phentsize, struct.calcsize(ph_format), "a program header"))
        if wide:
            p_type, _, p_offset, p_vaddr, _, p_filesz = fields[:6]
        else:
            p_type, p_offset, p_vaddr, _, p_filesz = fields[:5]
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return Dynamic()  # statically linked: it loads nothing
    offset, filesz = dynamic
    if filesz > _MAX_DYNAMIC:
        raise NotElf(DAMAGED.format(what=f"a dynamic section of {filesz} bytes"))
    raw = r.read(offset, filesz, "the dynamic section")
    step = struct.calcsize(entry_format)
    entries: list[tuple[int, int]] = []
    for at in range(0, len(raw) - step + 1, step):
        tag, value = struct.unpack_from(entry_format, raw, at)
        if tag == DT_NULL:
            break
        entries.append((tag, value))
    tags = dict(entries)
    if DT_STRTAB not in tags:
        return Dynamic()
    strtab = _file_offset(tags[DT_STRTAB], loads)
    strsz = tags.get(DT_STRSZ, _MAX_STRING)

    def string(index: int) -> str:
        if index >= strsz:
            raise NotElf(DAMAGED.format(what="a string past the string table"))
        start = strtab + index
        chunk = r.read(start, min(_MAX_STRING, strsz - index, size - start), "a string")
        end = chunk.find(b"\0")
        if end < 0:
            raise NotElf(DAMAGED.format(what="a string without its end"))
        return os.fsdecode(chunk[:end])

    needed = tuple(string(v) for t, v in entries if t == DT_NEEDED)
    runpath = string(tags[DT_RUNPATH]) if DT_RUNPATH in tags else None
    rpath = string(tags[DT_RPATH]) if DT_RPATH in tags else None
    soname = string(tags[DT_SONAME]) if DT_SONAME in tags else None
    return Dynamic(
        needed=needed,
        rpath=None if runpath is not None else _split(rpath),
        runpath=_split(runpath),
        soname=soname,
        raw_rpath=rpath,
        raw_runpath=runpath,
    )


def _file_offset(vaddr: int, loads: Sequence[tuple[int, int, int]]) -> int:
    for start, offset, filesz in loads:
        if start <= vaddr < start + filesz:
            return offset + (vaddr - start)
    raise NotElf(DAMAGED.format(what="the string table is in no loaded segment"))


def read_dynamic(path: str | os.PathLike[str]) -> Dynamic:
    """:func:`dynamic_of` the file at ``path`` (followed if a link: ld.so follows it too)."""
    with open(os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK), "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise NotElf(NOT_ELF)
        return dynamic_of(fh)


def is_elf(path: str | os.PathLike[str]) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


# -- the search ----------------------------------------------------------------------------------------------------


def _expand(entry: str, origin: Path) -> str | None:
    """``entry`` with $ORIGIN expanded; None when it holds another token ($LIB, $PLATFORM)."""
    for token in ("${ORIGIN}", "$ORIGIN"):
        entry = entry.replace(token, str(origin))
    return None if "$" in entry else entry


def _inside(path: str, root: Path) -> bool:
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def search_path_problems(path: Path, dyn: Dynamic, root: Path) -> list[str]:
    """What is wrong with the search path of the file at ``path`` in the build at ``root``, each one line."""
    out: list[str] = []
    for tag, raw, entries in (("RUNPATH", dyn.raw_runpath, _split(dyn.raw_runpath)), ("RPATH", dyn.raw_rpath, _split(dyn.raw_rpath))):
        for entry in entries or ():
            if entry == "":
                out.append(EMPTY_ENTRY.format(tag=tag, value=raw))
                continue
            expanded = _expand(entry, path.parent)
            if expanded is None or (entry.startswith("$") and not entry.startswith(("$ORIGIN", "${ORIGIN}"))):
                out.append(MACHINE_TOKEN.format(tag=tag, value=raw, entry=entry))
            elif not entry.startswith(("/", "$ORIGIN", "${ORIGIN}")):
                out.append(RELATIVE_ENTRY.format(tag=tag, value=raw, entry=entry))
            elif expanded is None:
                out.append(MACHINE_TOKEN.format(tag=tag, value=raw, entry=entry))
            elif entry.startswith("$") and not _inside(expanded, root):
                out.append(OUTSIDE_BUILD.format(tag=tag, value=raw, entry=entry, resolved=os.path.normpath(expanded)))
            elif _writable_by_others(expanded):
                out.append(WRITABLE_BY_OTHERS.format(tag=tag, value=raw, entry=entry))
    for name in dyn.needed:
        if "/" in name:
            out.append(NEEDS_A_PATH.format(name=name))
    return out


def _writable_by_others(directory: str) -> bool:
    try:
        return bool(os.stat(directory).st_mode & stat.S_IWOTH)
    except OSError:
        return False


@dataclass(frozen=True)
class Loaded:
    """One file the program loads from its build: the name ld.so looks for, where it is found, and who needs it."""

    name: str
    path: Path  # as found: beside its loader, maybe a link (the name of a versioned library usually is)
    needed_by: str


@dataclass(frozen=True)
class Closure:
    """What a program loads from its build, in ld.so's order, and the problems of every search path on the way."""

    program: Path
    libraries: tuple[Loaded, ...] = ()
    problems: tuple[tuple[str, str], ...] = ()  # (file, problem)
    dynamic: Mapping[str, Dynamic] = field(default_factory=dict)  # by the file's name as loaded (program: its name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(lib.name for lib in self.libraries)


def closure(program: Path, root: Path) -> Closure:
    """The libraries ``program`` loads from inside ``root``, breadth first as ld.so loads them: each file's DT_NEEDED
    looked up through its search path ($ORIGIN its own directory), the first hit wins, and a name loaded once is
    not looked up again. A name found outside ``root`` (or nowhere on the search path: ld.so.cache and the default
    directories) is the system's and not followed. Raises :class:`NotElf` for a damaged file; a program that is not
    ELF at all (a script) loads nothing."""
    if not is_elf(program):
        return Closure(program)
    found: dict[str, Loaded] = {}
    problems: list[tuple[str, str]] = []
    dynamics: dict[str, Dynamic] = {}
    # (name, path as found, $ORIGIN, the DT_RPATHs of the files that loaded it, nearest first)
    queue: list[tuple[str, Path, Path, tuple[tuple[Path, tuple[str, ...]], ...]]] = [(program.name, program, program.resolve().parent, ())]
    seen_system: set[str] = set()
    while queue:
        name, path, origin, chain = queue.pop(0)
        dyn = read_dynamic(path)
        dynamics[name] = dyn
        problems += [(name, p) for p in search_path_problems(path, dyn, root)]
        # glibc (dl-load.c): a file with DT_RUNPATH searches it alone; one without searches the DT_RPATH of itself and
        # of each file that loaded it, up to the program (a file with DT_RUNPATH has no DT_RPATH there), then nothing
        own = ((origin, dyn.rpath or ()), *chain)
        rpaths = () if dyn.runpath is not None else own
        for needed in dyn.needed:
            if needed in found or needed in seen_system or "/" in needed:
                continue
            hit = _search(needed, rpaths, (origin, dyn.runpath or ()))
            if hit is None or not _inside(str(hit), root):
                seen_system.add(needed)
                continue
            found[needed] = Loaded(needed, hit, name)
            queue.append((needed, hit, hit.parent, own))
    return Closure(program, tuple(found.values()), tuple(problems), dynamics)


def _search(name: str, rpaths: Sequence[tuple[Path, tuple[str, ...]]], runpath: tuple[Path, tuple[str, ...]]) -> Path | None:
    def dirs() -> Iterator[str]:
        for origin, entries in rpaths:
            for entry in entries:
                expanded = _expand(entry, origin)
                if expanded:
                    yield expanded
        origin, entries = runpath
        for entry in entries:
            expanded = _expand(entry, origin) if entry else None
            if expanded:
                yield expanded

    for directory in dirs():
        candidate = Path(directory) / name
        if candidate.is_file():
            return candidate
    return None
