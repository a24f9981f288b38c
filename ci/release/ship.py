"""``nox -s ship``: the serve launcher ships only when every gate passed for exactly the build being shipped.

The current build key is computed from what is here now (pins.yaml, the patch series, the profile, the
toolchain), not read from the manifest: a bump or a patch edited after the gates ran makes their records stale.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ci.command import run
from ci.compile.manifest import MANIFEST, Manifest
from ci.compile.stage import CurrentBuild
from ci.errors import GateFailed, Refused, ToolchainError
from ci.files import shown
from ci.gates import registry
from ci.gates.equivalence.plan import RELEASE_MODELS, TINY_MODELS
from ci.gates.perf import judge as perf
from ci.gates.protocol import Flags
from ci.gates.registry import always, required
from ci.gates.results import GateResult, Status
from ci.gates.serving import launcher as launcher_files
from ci.gates.serving.launcher import SOURCE_ROOT
from ci.pin.pins import EquivalenceConfig, Pins
from ci.release import binding
from ci.release import ledger as ledger_mod
from ci.release.compile_record import STRIX_HALO
from ci.words import AND_MORE
from serve.errors import printable

DIST_NAME = "onebit-serve"
SHIP = "ship"  # the ledger's record of a release
COUNTED = "counted.{gate}"  # a ship record's property: the ledger line of the gate's record that counted for it

# Messages, shared with the tests that match on them (tests/support/messages.py)
TABLE_HEAD = "ship: build {key} ({profile}, pin {pin}, patches {patches})"
TABLE_ROW = "  {gate}  {state:<8}  {detail}"  # gate padded to the longest gate's name
MODELS_TAG = " [{models}]"  # a counted equivalence or perf record's detail ends with the models it ran on
NOT_COUNTED = "; not counted: {why} (ledger line {line}{more})"  # the last record that does not count
OTHER_MODELS = "models {models}"  # NOT_COUNTED's why for a record on other models than the release's
# a FAILED record of this build's binaries under other criteria, newer than any that counts: it stands
FAILED_ELSEWHERE = "; it FAILED under other settings: {why} (ledger line {line}): a pass under today's criteria after it counts"
NO_COUNTED_RECORD = "no record {what} for this build: run nox -s gpu_tests{note}"
ON_MODELS = "on the {models}"  # NO_COUNTED_RECORD's what, for an equivalence or perf gate
THAT_COUNTS = "that counts"  # NO_COUNTED_RECORD's what, for any other gate
STALE_RECORD = "no record for this build; the last ({verdict}, line {line}) judged key {key}"
NO_RECORD = "no record: run nox -s gpu_tests"
NO_PYPA = "ship: the Python package {package} is not installed here; pip install {package} (nox -s ship installs it)"
REFUSED = "ship: refused: {failing} of {total} gates have not passed for this build ({gates})"
CPU_DEVICE = "CPU"  # the cpu profile's device (ci/compile/profiles.py): its gates run anywhere
# after REFUSED, for a profile of a GPU: gpu_tests on a machine without one runs none of the gates ship waits for
GATES_NEED_A_DEVICE = (
    "; the gates need a {device} device, a {profile} GPU{board}: run nox -s gpu_tests -- --profile {profile} where there "
    "is one, as CI's job 'gpu ({profile})' does on a self-hosted runner (.github/workflows/ci.yml, docs/ci.md)"
)
# NOT_COUNTED's why for a perf record judged against another release than the last one now (each RELEASE_AT or NO_RELEASE)
OTHER_BASELINE = "it compared with {judged}, and the last release now is {now}: run the perf gate again"
RELEASE_AT = "the release of pin {pin}"
NO_RELEASE = "no release"
LAUNCHER_COPY_DIFFERS = "ship: {launcher}: the wheel's copy of the launcher is not the launcher its gates judged ({why}); nothing was written"
# LAUNCHER_COPY_DIFFERS's whys
NOT_JUDGED = "the copy's digest is {copy}, the gates' records judged {judged}: it was edited after they ran, or while ship ran"
NO_JUDGED_LAUNCHER = "no record that counts names the launcher it judged"
COPY_FAILED = "it could not be copied: {error}"
DIST_IS_A_LINK = "ship: {dist} is a link; ship writes only into a folder of its own there (a link would send the wheel elsewhere)"


class Standing(Enum):
    PASSED = "passed"
    FAILED = "failed"
    MISSING = "missing"
    STALE = "stale"


@dataclass(frozen=True)
class GateStanding:
    gate: str
    state: Standing
    detail: str
    record: ledger_mod.Record | None = None


@dataclass(frozen=True)
class ShipCheck:
    key: str
    manifest: Manifest
    standings: tuple[GateStanding, ...]
    notes: tuple[str, ...] = ()  # what the ledger's reader set aside after a crash

    @property
    def ok(self) -> bool:
        return all(s.state is Standing.PASSED for s in self.standings)


def flags_of(gate: str) -> Flags:
    """The registry's flags of ``gate`` (a record's gate name); a name no gate has is flagged with nothing."""
    found = registry.by_name(gate)
    return found.flags if found is not None else Flags()


def counted_models(release: EquivalenceConfig | None) -> str:
    """The models a release is judged on: pins.yaml's (equivalence.model, .drafter), else the tiny generated ones."""
    return RELEASE_MODELS if release is not None and release.model is not None else TINY_MODELS


def standings(
    ledger: ledger_mod.Ledger,
    key: str,
    required: Sequence[str] | None = None,
    release: EquivalenceConfig | None = None,
    why_not: Callable[[ledger_mod.Record], str | None] | None = None,
    failed_here: Callable[[ledger_mod.Record], bool] | None = None,
) -> tuple[GateStanding, ...]:
    """Where each required gate stands for the build ``key``, from the ledger's records (pure). The equivalence and
    perf records that count are those on the models the release is judged on (:func:`counted_models`; pins.yaml's
    by sha256 when it gives them), and, given ``why_not`` (binding.why_not_counted), those that judged exactly the
    build's binaries against today's criteria; any other stays in the ledger and is shown as not counted. But a
    failure is evidence whatever the settings it ran under: a record ``failed_here`` says FAILED on this build's
    binaries (on the release's models), newer than the one that counts, stands (:data:`FAILED_ELSEWHERE`)."""
    out = []
    models = counted_models(release)
    for gate in always() if required is None else required:
        mine = [r for r in ledger.records if r.gate == gate and r.build_key == key]
        reasons: dict[int, str] = {}
        other_models: set[int] = set()  # records of another test than the release's: never held against it
        for r in mine:
            if flags_of(gate).on_models and not _on_models(r, models, release):
                reasons[r.line] = OTHER_MODELS.format(models=_models_of(r))
                other_models.add(r.line)
            elif why_not is not None and (why := why_not(r)) is not None:
                reasons[r.line] = why
        counted = [r for r in mine if r.line not in reasons]
        ignored = [r for r in mine if r.line in reasons]
        note = ""
        if ignored:
            last = ignored[-1]
            more = AND_MORE.format(count=len(ignored) - 1) if len(ignored) > 1 else ""
            note = NOT_COUNTED.format(why=reasons[last.line], line=last.line, more=more)
        rec = counted[-1] if counted else None
        failed = [r for r in ignored if failed_here is not None and r.line not in other_models and failed_here(r)]
        if failed and (rec is None or failed[-1].line > rec.line):
            last = failed[-1]
            detail = f"{last.data.get('summary', '')} ({last.data.get('time', '')})"
            out.append(GateStanding(gate, Standing.FAILED, detail + FAILED_ELSEWHERE.format(why=reasons[last.line], line=last.line), last))
            continue
        if rec is not None:
            state = Standing.PASSED if rec.verdict == Status.PASSED.value else Standing.FAILED
            problems = list(rec.data.get("problems", []))
            why = f": {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "") if state is Standing.FAILED and problems else ""
            detail = f"{rec.data.get('summary', '')}{why} (ledger line {rec.line}, {rec.data.get('time', '')})"
            if flags_of(gate).on_models:
                detail += MODELS_TAG.format(models=models)
            out.append(GateStanding(gate, state, detail + (note if any(r.line > rec.line for r in ignored) else ""), rec))
            continue
        if ignored:
            what = ON_MODELS.format(models=models) if flags_of(gate).on_models else THAT_COUNTS
            out.append(GateStanding(gate, Standing.MISSING, NO_COUNTED_RECORD.format(what=what, note=note)))
            continue
        others = [r for r in ledger.records if r.gate == gate]
        if others:
            last = others[-1]
            stale = STALE_RECORD.format(verdict=last.verdict, line=last.line, key=last.build_key[:12] or "none")
            out.append(GateStanding(gate, Standing.STALE, stale))
        else:
            out.append(GateStanding(gate, Standing.MISSING, NO_RECORD))
    return tuple(out)


def _models_of(rec: ledger_mod.Record) -> str:
    return str((rec.data.get("properties") or {}).get("models") or "not named")


def _on_models(rec: ledger_mod.Record, models: str, release: EquivalenceConfig | None) -> bool:
    """Whether ``rec`` ran on the models the release is judged on (and, where pins.yaml gives their sha256, on exactly
    those files: the equivalence record names both)."""
    props = rec.data.get("properties") or {}
    if props.get("models") != models:
        return False
    if not flags_of(rec.gate).binds_model_files or release is None or release.model is None or release.drafter is None:
        return True
    want = {"model_sha256": release.model.sha256, "drafter_sha256": release.drafter.sha256}
    return all(props.get(k) == v for k, v in want.items() if v is not None)


def check(build: CurrentBuild, pins: Pins, results_dir: Path, root: Path) -> ShipCheck:
    """Where each gate stands for the current build, after every binary and library of it is hashed again: ship
    takes no stat data and no build.json on trust (binding.py), and with no stray beside the code the digests bind
    the records to (bytecode without its source, a link: the judging process would have imported it unread)."""
    launcher_files.refuse_strays(binding.orchestration_dir(), launcher_files.launcher_dir())
    profile = build.manifest.profile
    wrong = build.manifest.reproved(build.build_dir)
    if wrong:
        name, what = wrong[0]
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        raise Refused(f"ship: the {profile} build's {name} {what} in {shown(build.build_dir / MANIFEST, root)}{more}: run nox -s build -- --profile {profile}, then the gates")
    ledger = ledger_mod.read(ledger_mod.ledger_path(results_dir), ledger_mod.signing_key())

    now = binding.criteria_now(pins, profile)

    models = counted_models(pins.equivalence)

    def baseline(gate: str) -> str:
        """The pin of the release a record of ``gate`` must have compared with: the last one now (on the release's
        models for a gate whose records name them), or "" when there is none."""
        found = released_record(ledger, profile, build.key, gate, models if flags_of(gate).on_models else None)
        return found[0] if found is not None else ""

    def why_not(record: ledger_mod.Record) -> str | None:
        return binding.why_not_counted(record, build.manifest, pins, now) or other_baseline(record, baseline)

    def failed_here(record: ledger_mod.Record) -> bool:
        """A FAILED record of a gate this checkout has, that judged exactly this build's binaries."""
        judged = record.data.get("manifest_sha256")
        return record.verdict == Status.FAILED.value and judged == build.manifest.digest and registry.by_name(record.gate) is not None

    found = standings(ledger, build.key, required(pins), release=pins.equivalence, why_not=why_not, failed_here=failed_here)
    return ShipCheck(build.key, build.manifest, found, ledger.notes)


def other_baseline(record: ledger_mod.Record, baseline: Callable[[str], str]) -> str | None:
    """Why a record of a gate that compares with the last release (perf, the oracle's kernel times) does not count: it
    compared the build with another release than the last one now (``baseline``: that release's pin for the gate, ""
    for none), a release shipped since or none then, so no check held it to the figures in force; None when it
    compared with this one."""
    if not flags_of(record.gate).compares_with_release:
        return None
    judged = str((record.data.get("properties") or {}).get("released_pin", ""))
    now = baseline(record.gate)
    if judged == now:
        return None
    return OTHER_BASELINE.format(judged=RELEASE_AT.format(pin=judged[:7]) if judged else NO_RELEASE, now=RELEASE_AT.format(pin=now[:7]) if now else NO_RELEASE)


def last_release(results_dir: Path, profile: str, key: str, models: str) -> perf.Released | None:
    """The perf figures of the last build of ``profile`` on ``models`` that shipped (the ledger's ship record and the
    perf record of its key), when there is one: what the perf gate compares a new build with."""
    return release_before(ledger_mod.read(ledger_mod.ledger_path(results_dir), ledger_mod.signing_key()), profile, key, models)


def release_before(book: ledger_mod.Ledger, profile: str, key: str, models: str) -> perf.Released | None:
    """:func:`last_release` in the ledger ``book`` (pure)."""
    found = released_record(book, profile, key, perf.GATE, models)
    return perf.Released(found[0], perf.medians(found[1].get("metrics") or {})) if found is not None else None


def released_record(book: ledger_mod.Ledger, profile: str, key: str, gate: str, models: str | None = None) -> tuple[str, Mapping[str, Any]] | None:
    """The pin of the last build of ``profile`` (not ``key``) that shipped with a record of ``gate`` (on ``models``
    where given), and that record's data; None when no such release is in ``book`` (pure)."""
    for rec in reversed(book.records):
        if rec.gate != SHIP or rec.data.get("profile") != profile or rec.build_key == key:
            continue
        found = counted_record(book, rec, gate)
        if found is None or (models is not None and (found.data.get("properties") or {}).get("models") != models):
            continue
        return str(rec.data.get("pin", "")), found.data
    return None


def counted_record(book: ledger_mod.Ledger, shipped: ledger_mod.Record, gate: str) -> ledger_mod.Record | None:
    """The record of ``gate`` that counted when ``shipped`` (a ship record) was written: the line it names. A later run
    of the released build (a 1-round perf failure at a tenth of its figures, a hostile pass found) is not the release's
    figures. A ship record written before it named them: the build's newest record, as then."""
    line = str((shipped.data.get("properties") or {}).get(COUNTED.format(gate=gate), ""))
    if not line:
        return ledger_mod.latest(book, gate, shipped.build_key)
    found = next((r for r in book.records if str(r.line) == line), None)
    return found if found is not None and found.gate == gate and found.build_key == shipped.build_key else None


def last_record(results_dir: Path, profile: str, key: str, gate: str) -> tuple[str, Mapping[str, Any]] | None:
    """:func:`released_record` in the results' ledger: what a gate that compares with the last release reads."""
    return released_record(ledger_mod.read(ledger_mod.ledger_path(results_dir), ledger_mod.signing_key()), profile, key, gate)


def table(result: ShipCheck) -> str:
    width = max(len(s.gate) for s in result.standings)
    m = result.manifest
    lines = [TABLE_HEAD.format(key=result.key[:12], profile=m.profile, pin=m.pin_commit[:7], patches=m.series_digest[:12])]
    for s in result.standings:
        shown = s.state.value if s.state is Standing.PASSED else s.state.value.upper()
        lines.append(TABLE_ROW.format(gate=s.gate.ljust(width), state=shown, detail=printable(s.detail)))  # a record's text: no escape reaches the terminal
    lines += [f"  ledger: {note}" for note in result.notes]
    return "\n".join(lines)


def release_manifest(pins: Pins, root: Path, result: ShipCheck, results_dir: Path) -> dict[str, Any]:
    m = result.manifest
    return {
        "schema": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pin": {"url": pins.fork.url, "branch": pins.fork.branch, "commit": pins.fork.commit, "reference": pins.fork.reference},
        "patches": m.patches,
        "build": {
            "key": m.key,
            "profile": m.profile,
            "device": m.device,
            "flags": list(m.flags),
            "local_flags": list(m.local_flags),
            "one_off_flags": list(m.one_off_flags),
            "toolchain": m.toolchain,
            "binaries": {k: a.sha256 for k, a in m.binaries.items()},
            # every library the gate binaries load from the build, and which each loads: 1bit serve checks and runs
            # llama-server with exactly these (serve/gated.py reads both; a release without them is not gated)
            "libraries": {k: a.sha256 for k, a in m.libraries.items()},
            "loads": {k: list(v) for k, v in m.loads.items()},
        },
        "evidence": next((str((s.record.data.get("properties") or {}).get("models", "")) for s in result.standings if flags_of(s.gate).on_models and s.record), ""),
        "gates": {
            s.gate: {
                "verdict": s.state.value,
                "counts": s.record.data.get("counts", {}) if s.record else {},
                "summary": s.record.data.get("summary", "") if s.record else "",
                "ledger_line": s.record.line if s.record else None,
                "record_sha256": s.record.sha256 if s.record else None,
                "properties": dict(s.record.data.get("properties") or {}) if s.record else {},
                "time": s.record.data.get("time") if s.record else None,
            }
            for s in result.standings
        },
        "ledger": shown(ledger_mod.ledger_path(results_dir), root),
    }


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
    _create(stage / "serve" / "release.json", release)
    _create(stage / "pyproject.toml", pyproject)
    _require_pypa_build()
    # run from the stage: the project's own build/ directory would shadow the package "build" (python -m build)
    run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(stage / "dist"), str(stage)], cwd=stage, what="python -m build")
    release_file = stage / f"{DIST_NAME.replace('-', '_')}-{version}.release.json"
    _create(release_file, release)
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

    launcher_files.refuse_strays(launcher)
    items: list[tuple[str, bytes]] = []
    files: dict[str, str] = {}
    try:
        os.mkdir(copy, 0o700)
        for path, st in launcher_files.entries(launcher):
            name = path.relative_to(launcher).as_posix()
            target = copy / name
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(target, 0o755)
                items.append((name, launcher_files.FOLDER_ENTRY))
            elif stat.S_ISREG(st.st_mode):
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as fh:
                    data = fh.read()
                _create(target, data, 0o644 | (st.st_mode & 0o111))
                sha = hashlib.sha256(data)
                items.append((name, launcher_files.FILE_ENTRY + sha.digest()))
                files[name] = sha.hexdigest()
            else:  # a link or a pipe that came after the strays were looked for
                raise OSError(errno.EINVAL, "neither a file nor a folder", str(path))
    except OSError as exc:  # a file that went away, or came, while it was copied
        raise Refused(LAUNCHER_COPY_DIFFERS.format(launcher=launcher, why=COPY_FAILED.format(error=str(exc)[:200]))) from None
    return Copied(launcher_files.entries_sha256(items), files)


def judged_launcher(result: ShipCheck, launcher: Path, copy: Copied) -> None:
    """Refuse a copy whose digest is not the launcher every counted record that names one judged (the route's, the
    equivalence's, the perf's criteria), or when none names one."""
    judged = [str(c["launcher_sha256"]) for s in result.standings if s.record is not None and isinstance(c := s.record.data.get("criteria"), Mapping) and "launcher_sha256" in c]
    if not judged:
        raise Refused(LAUNCHER_COPY_DIFFERS.format(launcher=launcher, why=NO_JUDGED_LAUNCHER))
    other = next((d for d in judged if d != copy.digest), None)
    if other is not None:
        raise Refused(LAUNCHER_COPY_DIFFERS.format(launcher=launcher, why=NOT_JUDGED.format(copy=copy.digest[:12], judged=other[:12])))


def checked_outputs(stage: Path, release_file: Path, copy: Copied, release: bytes, pyproject: bytes, version: str) -> dict[str, bytes]:
    """What ship publishes, read once and checked: ``stage/dist`` must hold exactly this version's wheel and sdist,
    regular files (opened without following a link), and nothing else; each is opened from the bytes read and held to
    an allow-list, by name and by content: under ``serve/`` the files ship copied, with the sha256 they had
    (``release.json`` the manifest ship wrote), every one of them; beside them only the metadata python -m build writes
    for this project, each as ship expects it (the name, version, summary and requirements, each header once; console
    script, top-level package; the wheel's RECORD naming every member with its hash; the sdist's pyproject.toml ship's
    own). A member whose name has a ``..``, ``.`` or empty part, or that is not a regular file, is refused. Then each
    archive is written again from the members checked, so no byte the check did not read (an archive before the
    wheel's, a tar after the sdist's end) is published. The stage is private to this user only: a process of the same
    user (an orphan of a gate) could edit the copy after the check, or the outputs after the build (a wheel given
    ``<dist-info>/../evil_hook.pth``; an extra file; a link to /proc/self/environ, which put ship's own environment in
    dist/). Returned in the order wheel, sdist, release manifest."""
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


def _create(path: Path, data: bytes, mode: int = 0o644, dir_fd: int | None = None) -> None:
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


def publish(built: Mapping[str, bytes], dist: Path, root: Path) -> list[Path]:
    """Each of ``built`` into ``dist`` under its own name: written under a fresh name made there (``O_EXCL``, no link
    followed), then renamed over the name, so that what stood there (a link to a file elsewhere) is replaced, never
    written through. ``dist`` itself must be a folder, not a link: a link to a folder elsewhere is refused."""
    try:
        st = os.lstat(dist)
    except FileNotFoundError:
        dist.mkdir(parents=True)
        st = os.lstat(dist)
    if stat.S_ISLNK(st.st_mode):
        raise Refused(DIST_IS_A_LINK.format(dist=_lexically(dist, root)))
    folder = os.open(dist, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)  # a link swapped in since: ELOOP, named
    try:
        for name, data in built.items():
            fresh = _create_fresh(name, data, folder)
            try:
                os.replace(fresh, name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(fresh, dir_fd=folder)
                raise
        os.fsync(folder)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(dist)) from None
    finally:
        os.close(folder)
    return [dist / name for name in built]


def _create_fresh(name: str, data: bytes, folder: int) -> str:
    """``data`` in a new file of ``folder`` under a fresh name (O_EXCL: a name taken meanwhile is passed over, never
    written through); the name."""
    while True:
        fresh = f".{name}.{secrets.token_hex(8)}.tmp"
        try:
            _create(Path(fresh), data, dir_fd=folder)
        except FileExistsError:
            continue
        return fresh


def _lexically(path: Path, root: Path) -> str:
    """``path`` as given, relative to ``root`` when inside it, without following a link (:func:`shown` resolves)."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _require_pypa_build() -> None:
    import importlib.util

    for module, package in (("build", "build"), ("setuptools", "setuptools")):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None or (module == "build" and not Path(spec.origin).with_name("__main__.py").is_file()):
            raise ToolchainError(NO_PYPA.format(package=package))


def refusal(result: ShipCheck) -> GateFailed:
    bad = [s for s in result.standings if s.state is not Standing.PASSED]
    message = REFUSED.format(failing=len(bad), total=len(result.standings), gates=", ".join(s.gate for s in bad))
    m = result.manifest
    if m.device != CPU_DEVICE and any(s.state in (Standing.MISSING, Standing.STALE) for s in bad):
        message += GATES_NEED_A_DEVICE.format(device=m.device, profile=m.profile, board=STRIX_HALO if m.profile == "gfx1151" else "")
    return GateFailed(message)


def ship(pins: Pins, root: Path, result: ShipCheck, results_dir: Path, dist: Path) -> list[Path]:
    """Build the distribution for a passing ``result`` (a refused one raises): the launcher copied once into a private
    folder, that copy's digest held against the gates' records, the wheel built from the copy, and each output put in
    ``dist`` under a fresh name and renamed (:func:`publish`)."""
    if not result.ok:
        raise refusal(result)
    manifest = release_manifest(pins, root, result, results_dir)
    base = _base_version()
    with tempfile.TemporaryDirectory(prefix="onebit-ship-") as tmp:  # made 0700: nobody else writes in it
        stage = Path(tmp)
        launcher = launcher_files.launcher_dir()
        copy = snapshot(launcher, stage / "serve")
        judged_launcher(result, launcher, copy)
        version = release_version(base, manifest["pin"]["commit"], manifest["build"]["key"])
        release, pyproject = release_text(manifest), pyproject_text(packages_of(stage), version)  # of the copy as checked
        release_file = build_distribution(stage, release, pyproject, version)
        outputs = checked_outputs(stage, release_file, copy, release, pyproject, version)
        built = publish(outputs, dist, root)
    # the release in the ledger: the next bump's perf gate compares with this build's figures
    m = result.manifest
    # and which record of each gate counted for it: what the next build is compared with, not a later run of this one
    counted = tuple((COUNTED.format(gate=s.gate), str(s.record.line)) for s in result.standings if s.record is not None)
    # and what it published, by content: a wheel swapped in dist/ before the job uploads it is told from this one
    bound = tuple((f"{kind}_sha256", hashlib.sha256(data).hexdigest()) for kind, data in zip(OUTPUTS, outputs.values(), strict=True))
    shipped = GateResult(SHIP, Status.PASSED, f"shipped {built[0].name}", properties=(("release", built[-1].name), *counted, *bound))
    ledger_mod.append(ledger_mod.ledger_path(results_dir), shipped, binding.context_of(pins, m))
    return built


def _base_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("onebit-ci")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed (a GPU box, --no-venv)
        import re

        found = re.search(r'^version = "([^"]+)"', (SOURCE_ROOT / "pyproject.toml").read_text(), re.MULTILINE)
        return found.group(1) if found else "0.0.0"
