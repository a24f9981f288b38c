"""``nox -s ship``: the serve launcher ships only when every gate passed for exactly the build being shipped.

The current build key is computed from what is here now (pins.yaml, the patch series, the profile, the toolchain), not
read from the manifest: a bump or a patch edited after the gates ran makes their records stale. Which record stands is
:mod:`ci.release.standings`' to say; the wheel is :mod:`ci.release.wheel`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci import digests, scratch
from ci.compile.manifest import MANIFEST, Manifest
from ci.compile.stage import CurrentBuild
from ci.errors import GateFailed, Refused
from ci.files import shown
from ci.gates.registry import required, runnable
from ci.gates.results import GateResult, Status
from ci.gates.serving import launcher as launcher_files
from ci.gates.serving.launcher import SOURCE_ROOT
from ci.pin.pins import Pins
from ci.release import binding
from ci.release import ledger as ledger_mod
from ci.release.compile_record import STRIX_HALO
from ci.release.standings import COUNTED, SHIP, GateStanding, Standing, flags_of, for_build
from ci.release.wheel import (
    LAUNCHER_COPY_DIFFERS,
    NO_JUDGED_LAUNCHER,
    NOT_JUDGED,
    OUTPUTS,
    Copied,
    build_distribution,
    checked_outputs,
    create_file,
    packages_of,
    pyproject_text,
    release_text,
    release_version,
    snapshot,
)  # fmt: skip
from serve.errors import printable

# Messages, shared with the tests that match on them (tests/support/messages.py)
TABLE_HEAD = "ship: build {key} ({profile}, pin {pin}, patches {patches})"
TABLE_ROW = "  {gate}  {state:<8}  {detail}"  # gate padded to the longest gate's name
NOT_REQUIRED_NOW = "; pins.yaml does not require {gate} now, but its failure on this build stands until it passes again: nox -s gpu_tests -- --gate {gate}"
REFUSED = "ship: refused: {failing} of {total} gates have not passed for this build ({gates})"
CPU_DEVICE = "CPU"  # the cpu profile's device (ci/compile/profiles.py): its gates run anywhere
# after REFUSED, for a profile of a GPU: gpu_tests on a machine without one runs none of the gates ship waits for
GATES_NEED_A_DEVICE = (
    "; the gates need a {device} device, a {profile} GPU{board}: run nox -s gpu_tests -- --profile {profile} where there "
    "is one, as CI's job 'gpu ({profile})' does on a self-hosted runner (.github/workflows/ci.yml, docs/ci.md)"
)
DIST_IS_A_LINK = "ship: {dist} is a link; ship writes only into a folder of its own there (a link would send the wheel elsewhere)"


@dataclass(frozen=True)
class ShipCheck:
    key: str
    manifest: Manifest
    standings: tuple[GateStanding, ...]
    notes: tuple[str, ...] = ()  # what the ledger's reader set aside after a crash

    @property
    def ok(self) -> bool:
        return all(s.state is Standing.PASSED for s in self.standings)


def check(build: CurrentBuild, pins: Pins, results_dir: Path, root: Path) -> ShipCheck:
    """Where each gate stands for the current build, after every binary and library of it is hashed again: ship
    takes no stat data and no build.json on trust (binding.py), and with no stray beside the code the digests bind
    the records to (bytecode without its source, a link: the judging process would have imported it unread)."""
    digests.refuse_strays(binding.orchestration_dir(), launcher_files.launcher_dir())
    profile = build.manifest.profile
    wrong = build.manifest.reproved(build.build_dir)
    if wrong:
        name, what = wrong[0]
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        raise Refused(f"ship: the {profile} build's {name} {what} in {shown(build.build_dir / MANIFEST, root)}{more}: run nox -s build -- --profile {profile}, then the gates")
    ledger = ledger_mod.read(ledger_mod.ledger_path(results_dir), ledger_mod.signing_key())
    wanted = required(pins)
    # a gate this build failed stands though pins.yaml (edited since, committed or not) no longer requires it
    recorded = {r.gate for r in ledger.records if r.build_key == build.key}
    tried = [g for g in runnable() if g in recorded and g not in wanted]
    found = for_build(ledger, build.manifest, pins, (*wanted, *tried))
    failed = [dataclasses.replace(s, detail=s.detail + NOT_REQUIRED_NOW.format(gate=s.gate)) for s in found if s.gate in tried and s.state is Standing.FAILED]
    return ShipCheck(build.key, build.manifest, (*(s for s in found if s.gate not in tried), *failed), ledger.notes)


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
        # the variables of the gates' environment that change a result, as every counted record judged them (ship
        # holds each record's to its own): 1bit serve is to run under these, and no library path (it drops one)
        "environment": binding.environment_criterion(m.profile),
    }


def judged_launcher(result: ShipCheck, launcher: Path, copy: Copied) -> None:
    """Refuse a copy whose digest is not the launcher every counted record that names one judged (the route's, the
    equivalence's, the perf's criteria), or when none names one."""
    judged = [str(c["launcher_sha256"]) for s in result.standings if s.record is not None and isinstance(c := s.record.data.get("criteria"), Mapping) and "launcher_sha256" in c]
    if not judged:
        raise Refused(LAUNCHER_COPY_DIFFERS.format(launcher=launcher, why=NO_JUDGED_LAUNCHER))
    other = next((d for d in judged if d != copy.digest), None)
    if other is not None:
        raise Refused(LAUNCHER_COPY_DIFFERS.format(launcher=launcher, why=NOT_JUDGED.format(copy=copy.digest[:12], judged=other[:12])))


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
            create_file(Path(fresh), data, dir_fd=folder)
        except FileExistsError:
            continue
        return fresh


def _lexically(path: Path, root: Path) -> str:
    """``path`` as given, relative to ``root`` when inside it, without following a link (:func:`shown` resolves)."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


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
    with tempfile.TemporaryDirectory(prefix=scratch.prefix("ship")) as tmp:  # made 0700: nobody else writes in it
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
