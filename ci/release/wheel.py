"""The launcher's wheel and sdist: copied once into a private stage (:func:`snapshot`), built there with
``python -m build``, and read back once and held to an allow-list by name and content (:func:`checked_outputs`), so
that only the bytes ship checked are published.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci import digests
from ci.command import run
from ci.errors import Refused, ToolchainError

DIST_NAME = "onebit-serve"

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_PYPA = "ship: the Python package {package} is not installed here; pip install {package} (nox -s ship installs it)"
LAUNCHER_COPY_DIFFERS = "ship: {launcher}: the wheel's copy of the launcher is not the launcher its gates judged ({why}); nothing was written"
# LAUNCHER_COPY_DIFFERS's whys
NOT_JUDGED = "the copy's digest is {copy}, the gates' records judged {judged}: it was edited after they ran, or while ship ran"
NO_JUDGED_LAUNCHER = "no record that counts names the launcher it judged"
COPY_FAILED = "it could not be copied: {error}"
WHEEL, SDIST = "wheel", "sdist"
OUTPUTS = ("wheel", "sdist", "release")  # checked_outputs' order, as the ship record names each output's sha256
WHEEL_TIME = (1980, 1, 1, 0, 0, 0)  # the members' time in the archives ship writes again: the same bytes every time
SDIST_TIME = 315532800
BUILT_DIFFERS = "ship: the {what} {name} python -m build wrote is not what ship copied and checked: {member} {why}; nothing was written"
MEMBER_NOT_JUDGED = "is not the launcher's file the gates judged (edited in ship's stage since it was checked?)"
MEMBER_MISSING = "is missing"
MEMBER_UNKNOWN = "is no file of the launcher or its metadata"
MEMBER_NOT_EXPECTED = "is not the metadata python -m build writes for this project"
MEMBER_NAME = "has a name that leaves its folder, or names one member twice"
MEMBER_NOT_A_FILE = "is not a regular file"
DIST_UNEXPECTED = "is not this version's wheel or sdist"
NOT_AN_ARCHIVE = "cannot be read as one ({error})"
CONSOLE_SCRIPTS = "[console_scripts]\n1bit = serve.cli:main\n"
TOP_LEVEL = "serve\n"
REQUIRES = ("gguf>=0.10", "pyyaml>=6")  # the launcher's requirements, as PYPROJECT declares them
REQUIRES_PYTHON = ">=3.10"
SUMMARY = "1bit serve: llama-server launcher for the ROCmFPX fork, shipped with the evidence of its gates"
SETUP_CFG = b"[egg_info]\ntag_build = \ntag_date = 0\n\n"  # what setuptools' sdist writes, and no option
EGG_INFO = "onebit_serve.egg-info"
METADATA_VERSIONS = ("2.1", "2.2", "2.3", "2.4")  # what setuptools writes (69 and later)


PYPROJECT = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "{summary}"
requires-python = "{requires_python}"
dependencies = {requires}

[project.scripts]
1bit = "serve.cli:main"

[tool.setuptools]
packages = {packages}

[tool.setuptools.package-data]
serve = ["config/*.json", "release.json"]
"""


def release_version(base_version: str, pin: str, key: str) -> str:
    """``BASE+g<pin7>.b<key8>``: each local segment starts with a letter, so PEP 440 keeps it as written. A segment of
    digits alone is read as a number (``01281189`` became ``1281189`` in the wheel's name, no longer the key's
    prefix), which a key or a pin does about one time in 400."""
    return f"{base_version}+g{pin[:7]}.b{key[:8]}"


def build_distribution(stage: Path, release: bytes, pyproject: bytes, version: str) -> Path:
    """Wheel and sdist of the launcher copied into ``stage/serve`` (:func:`snapshot`), with the release manifest
    ``release`` inside, built in ``stage`` from ``pyproject`` into ``stage/dist``; the release manifest's path (written
    beside them)."""
    create_file(stage / "serve" / "release.json", release)
    create_file(stage / "pyproject.toml", pyproject)
    _require_pypa_build()
    # run from the stage: the project's own build/ directory would shadow the package "build" (python -m build)
    run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(stage / "dist"), str(stage)], cwd=stage, what="python -m build")
    release_file = stage / f"{DIST_NAME.replace('-', '_')}-{version}.release.json"
    create_file(release_file, release)
    return release_file


def packages_of(stage: Path) -> list[str]:
    return sorted(str(p.parent.relative_to(stage)).replace("/", ".") for p in (stage / "serve").rglob("__init__.py"))


def release_text(manifest: dict[str, Any]) -> bytes:
    """The release manifest as ship writes it, into the wheel and beside it."""
    return (json.dumps(manifest, indent=2) + "\n").encode()


def pyproject_text(stage_packages: Sequence[str], version: str) -> bytes:
    return PYPROJECT.format(
        name=DIST_NAME, version=version, packages=json.dumps(list(stage_packages)), summary=SUMMARY, requires_python=REQUIRES_PYTHON, requires=json.dumps(list(REQUIRES))
    ).encode()


@dataclass(frozen=True)
class Copied:
    """The launcher as ship copied it: the digest of what it read and wrote (never of the copy as it lies since), and
    each file's sha256 by its path under ``serve/``."""

    digest: str
    files: Mapping[str, str]


def snapshot(launcher: Path, copy: Path) -> Copied:
    """Copy the launcher into ``copy`` (in a private folder), and return what was copied: what the wheel is built
    from, and what is held against the gates' records and then against the wheel itself. Its strays (a link,
    bytecode) are refused first; what changes while it is copied changes the digest, which then is not the one they
    judged."""

    digests.refuse_strays(launcher)
    items: list[tuple[str, bytes]] = []
    files: dict[str, str] = {}
    try:
        os.mkdir(copy, 0o700)
        for path, st in digests.entries(launcher):
            name = path.relative_to(launcher).as_posix()
            target = copy / name
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(target, 0o755)
                items.append((name, digests.FOLDER_ENTRY))
            elif stat.S_ISREG(st.st_mode):
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as fh:
                    data = fh.read()
                create_file(target, data, 0o644 | (st.st_mode & 0o111))
                sha = hashlib.sha256(data)
                items.append((name, digests.FILE_ENTRY + sha.digest()))
                files[name] = sha.hexdigest()
            else:  # a link or a pipe that came after the strays were looked for
                raise OSError(errno.EINVAL, "neither a file nor a folder", str(path))
    except OSError as exc:  # a file that went away, or came, while it was copied
        raise Refused(LAUNCHER_COPY_DIFFERS.format(launcher=launcher, why=COPY_FAILED.format(error=str(exc)[:200]))) from None
    return Copied(digests.entries_sha256(items), files)


def checked_outputs(stage: Path, release_file: Path, copy: Copied, release: bytes, pyproject: bytes, version: str) -> dict[str, bytes]:
    """What ship publishes, read once and checked: ``stage/dist`` must hold exactly this version's wheel and sdist,
    regular files opened without following a link; each is opened from the bytes read and held to an allow-list by
    name and content (the files ship copied with their sha256, and only the metadata python -m build writes for this
    project), then written again from the members checked, so no byte the check did not read is published. The stage
    keeps other users out, not this user's processes. In the order wheel, sdist, release manifest."""
    stem = f"{DIST_NAME.replace('-', '_')}-{version}"
    wheel, sdist = f"{stem}-py3-none-any.whl", f"{stem}.tar.gz"
    found = sorted(os.listdir(stage / "dist"))
    if found != sorted((wheel, sdist)):
        odd = next((n for n in found if n not in (wheel, sdist)), None)
        member, why = (odd, DIST_UNEXPECTED) if odd else (next(n for n in (wheel, sdist) if n not in found), MEMBER_MISSING)
        raise Refused(BUILT_DIFFERS.format(what="dist/", name=f"({', '.join(found)})", member=member, why=why))
    outputs: dict[str, bytes] = {}
    for name, what in ((wheel, WHEEL), (sdist, SDIST)):
        data = _read_regular(stage / "dist" / name, what)
        try:
            if what == WHEEL:
                outputs[name] = _check_wheel(name, data, copy, release, version)
            else:
                outputs[name] = _check_sdist(name, data, copy, release, pyproject, version)
        except (OSError, EOFError, ValueError, KeyError, IndexError, UnicodeError) as exc:  # zipfile's, tarfile's, csv's
            raise Refused(BUILT_DIFFERS.format(what=what, name=name, member="the archive", why=NOT_AN_ARCHIVE.format(error=str(exc)[:120]))) from None
    outputs[release_file.name] = _read_regular(release_file, "release manifest")
    return outputs


def _read_regular(path: Path, what: str) -> bytes:
    """A file's bytes, opened without following a link, refused unless it is a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise Refused(BUILT_DIFFERS.format(what=what, name=path.name, member=path.name, why=MEMBER_NOT_A_FILE + f" ({exc.strerror})")) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise Refused(BUILT_DIFFERS.format(what=what, name=path.name, member=path.name, why=MEMBER_NOT_A_FILE))
        return fh.read()


class _Members:
    """An output's members, checked one by one against what it may hold: :meth:`take` each expected one."""

    def __init__(self, what: str, name: str, members: Sequence[tuple[str, bytes | None]], top: str) -> None:
        self.what, self.name, self.top = what, name, top
        self.left: dict[str, bytes] = {}
        for member, data in members:
            inner = member.removeprefix(top) if top else member
            parts = inner.split("/")
            if (top and not member.startswith(top)) or "\\" in member or any(p in ("", ".", "..") for p in parts) or inner in self.left:
                raise self.differs(member, MEMBER_NAME)
            if data is None:
                raise self.differs(member, MEMBER_NOT_A_FILE)
            self.left[inner] = data

    def differs(self, member: str, why: str) -> Refused:
        return Refused(BUILT_DIFFERS.format(what=self.what, name=self.name, member=member, why=why))

    def take(self, inner: str) -> bytes:
        if inner not in self.left:
            raise self.differs(self.top + inner, MEMBER_MISSING)
        return self.left.pop(inner)

    def expect(self, inner: str, ok: Callable[[bytes], bool]) -> bytes:
        data = self.take(inner)
        if not ok(data):
            raise self.differs(self.top + inner, MEMBER_NOT_EXPECTED)
        return data

    def launcher(self, copy: Copied, release: bytes) -> None:
        """Every file ship copied under ``serve/``, with its sha256, and ``serve/release.json`` ship's manifest."""
        for rel, sha in sorted({**copy.files, "release.json": hashlib.sha256(release).hexdigest()}.items()):
            if hashlib.sha256(self.take(f"serve/{rel}")).hexdigest() != sha:
                raise self.differs(f"{self.top}serve/{rel}", MEMBER_NOT_JUDGED)

    def nothing_else(self) -> None:
        if self.left:
            member = sorted(self.left)[0]
            raise self.differs(self.top + member, MEMBER_UNKNOWN)


def _metadata_ok(version: str) -> Callable[[bytes], bool]:
    """METADATA (PKG-INFO): this project's name, version, summary and requirements, nothing more."""

    def ok(data: bytes) -> bool:
        from email.parser import BytesHeaderParser

        msg = BytesHeaderParser().parsebytes(data)
        allowed = {"Metadata-Version", "Name", "Version", "Summary", "Requires-Python", "Requires-Dist"}
        return (
            set(msg.keys()) <= allowed
            and all(len(msg.get_all(h) or ()) == 1 for h in allowed - {"Requires-Dist"})
            and msg["Metadata-Version"] in METADATA_VERSIONS
            and (msg["Name"], msg["Version"], msg["Summary"], msg["Requires-Python"]) == (DIST_NAME, version, SUMMARY, REQUIRES_PYTHON)
            and tuple(msg.get_all("Requires-Dist") or ()) == REQUIRES
            and not msg.get_payload()
        )

    return ok


def _wheel_ok(data: bytes) -> bool:
    from email.parser import BytesHeaderParser

    msg = BytesHeaderParser().parsebytes(data)
    return (
        sorted(msg.keys()) == sorted(("Wheel-Version", "Generator", "Root-Is-Purelib", "Tag"))
        and (msg["Wheel-Version"], msg["Root-Is-Purelib"], msg["Tag"]) == ("1.0", "true", "py3-none-any")
        and str(msg["Generator"]).startswith("setuptools (")
        and not msg.get_payload()
    )


def _text_is(text: str) -> Callable[[bytes], bool]:
    return lambda data: data.decode(errors="replace").strip() == text.strip()


def _check_wheel(name: str, data: bytes, copy: Copied, release: bytes, version: str) -> bytes:
    import base64
    import csv
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
        read = [(i.filename, None if i.is_dir() or stat.S_IFMT(i.external_attr >> 16) not in (0, stat.S_IFREG) else zf.read(i)) for i in infos]
    members = _Members(WHEEL, name, read, "")
    everything = dict(members.left)
    info = f"{DIST_NAME.replace('-', '_')}-{version}.dist-info/"
    members.launcher(copy, release)
    members.expect(info + "METADATA", _metadata_ok(version))
    members.expect(info + "WHEEL", _wheel_ok)
    members.expect(info + "entry_points.txt", _text_is(CONSOLE_SCRIPTS))
    members.expect(info + "top_level.txt", _text_is(TOP_LEVEL))

    def record_ok(text: bytes) -> bool:  # every member named once, with its sha256 and size; RECORD itself unhashed
        rows = list(csv.reader(io.StringIO(text.decode(errors="replace"))))
        if any(len(row) != 3 for row in rows if row):
            return False
        named = {row[0]: row[1:] for row in rows if row}
        if len(named) != len([r for r in rows if r]) or set(named) != set(everything):
            return False
        for member, (digest, size) in ((k, v) for k, v in named.items() if k != info + "RECORD"):
            body = everything[member]
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
            if (digest, size) != (want, str(len(body))):
                return False
        return True

    members.expect(info + "RECORD", record_ok)
    members.nothing_else()
    out = io.BytesIO()  # written again from the members checked, in their order: no byte around them goes out
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, _ in read:
            zf.writestr(zipfile.ZipInfo(member, date_time=WHEEL_TIME), everything[member], zipfile.ZIP_DEFLATED)
    return out.getvalue()


def _check_sdist(name: str, data: bytes, copy: Copied, release: bytes, pyproject: bytes, version: str) -> bytes:
    import gzip
    import io
    import tarfile

    top = f"{DIST_NAME.replace('-', '_')}-{version}/"
    read: list[tuple[str, bytes | None]] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
        for info in tf.getmembers():
            if info.isdir():
                parts = info.name.rstrip("/").split("/")
                if (not (info.name.rstrip("/") + "/").startswith(top) and info.name.rstrip("/") != top.rstrip("/")) or any(p in ("", ".", "..") for p in parts):
                    raise Refused(BUILT_DIFFERS.format(what=SDIST, name=name, member=info.name, why=MEMBER_NAME))
                continue
            fh = tf.extractfile(info) if info.isreg() else None
            read.append((info.name, fh.read() if fh is not None else None))
    members = _Members(SDIST, name, read, top)
    members.launcher(copy, release)
    members.expect("pyproject.toml", lambda b: b == pyproject)
    members.expect("setup.cfg", lambda b: b == SETUP_CFG)
    for pkg_info in ("PKG-INFO", f"{EGG_INFO}/PKG-INFO"):
        members.expect(pkg_info, _metadata_ok(version))
    members.expect(f"{EGG_INFO}/entry_points.txt", _text_is(CONSOLE_SCRIPTS))
    members.expect(f"{EGG_INFO}/top_level.txt", _text_is(TOP_LEVEL))
    members.expect(f"{EGG_INFO}/requires.txt", _text_is("\n".join(REQUIRES)))
    members.expect(f"{EGG_INFO}/dependency_links.txt", lambda b: not b.strip())
    sources = {"pyproject.toml", *(f"{EGG_INFO}/{n}" for n in ("PKG-INFO", "SOURCES.txt", "dependency_links.txt", "entry_points.txt", "requires.txt", "top_level.txt"))}
    sources |= {f"serve/{rel}" for rel in (*copy.files, "release.json")}
    members.expect(f"{EGG_INFO}/SOURCES.txt", lambda b: set(b.decode(errors="replace").split()) <= sources)
    members.nothing_else()
    out = io.BytesIO()  # written again from the members checked: no tar after the end, no second gzip member
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for member, body in read:
            info = tarfile.TarInfo(member)
            info.size, info.mode, info.mtime = len(body or b""), 0o644, SDIST_TIME
            tf.addfile(info, io.BytesIO(body or b""))
    return out.getvalue()


def create_file(path: Path, data: bytes, mode: int = 0o644, dir_fd: int | None = None) -> None:
    """Write ``data`` to a file ``path`` that must not exist yet (never through a link left at its name); removed
    again when it cannot be written whole."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path, dir_fd=dir_fd)
        raise


def _require_pypa_build() -> None:
    import importlib.util

    for module, package in (("build", "build"), ("setuptools", "setuptools")):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None or (module == "build" and not Path(spec.origin).with_name("__main__.py").is_file()):
            raise ToolchainError(NO_PYPA.format(package=package))
