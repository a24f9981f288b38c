"""What binds a gate's record to what ship ships: the binaries it ran on and the criteria it judged against.

At gate time each record carries ``manifest_sha256`` (the build key and every binary's and library's sha256) and
``criteria`` (what the gate judged against, the launcher and route tests it ran, the environment its programs ran in
and the ci package that judged it) with its digest. At ship time :func:`why_not_counted` compares them with the
build ship has just hashed again and the criteria that hold now; docs/release.md's table lists each binding.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ci.compile import profiles
from ci.compile.manifest import Manifest
from ci.digests import at_start
from ci.environment import recorded_environment
from ci.errors import Refused
from ci.gates import registry
from ci.gates.results import GateResult
from ci.gates.serving.launcher import launcher_dir, launcher_sha256
from ci.pin.pins import Pins
from ci.release import ledger

# Messages, shared with the tests that match on them (tests/support/messages.py): why a record does not count
OTHER_BINARIES = "it judged other binaries (manifest {recorded}, build.json now {current})"
OTHER_CRITERIA = "it judged other criteria than pins.yaml's and the committed faults' ({changes})"
NO_SUCH_GATE = "no gate of this checkout is called {gate}"
OTHER_LIBRARIES = "it ran {name} {ran}, not the build's {build}"
LOADED_PROPERTY = "loaded_libraries"  # a record's: name=sha256 of each library of the build its programs mapped (ci.loaded)
ELSEWHERE_PROPERTY = "loaded_elsewhere"  # and the libraries they mapped from outside the build and the system's folders
CRITERION_CHANGED = "{criterion} {judged}, now {current}"
CI_CHANGED = "ci/ or serve/ changed while the gates ran (ci_sha256 {judged} when they started, {now} now): not recorded in the ledger; run them again on an unchanged checkout"  # OTHER_CRITERIA's changes, joined by "; "


def orchestration_dir() -> Path:
    """The ci package that runs and judges the gates: the one this Python imports (this checkout's)."""
    import ci

    return Path(ci.__file__).resolve().parent


def orchestration_dirs() -> tuple[Path, Path]:
    """The code a judging process runs: the ci package and the serve package it imports (serve.bounded, serve.elf,
    ... load as ci starts), each the one this Python imports."""
    return orchestration_dir(), launcher_dir()


def orchestration_sha256(digests: tuple[str, ...] | None = None) -> str:
    """One digest of ci/ and serve/ (each read as the launcher's is, :func:`launcher_sha256`; ``digests``: theirs,
    when taken already): every record is bound to the code that ran and judged it, so a judge weakened for a gate
    run and put back afterwards leaves records that do not count, through either package."""
    parts = digests or tuple(launcher_sha256(d) for d in orchestration_dirs())
    return hashlib.sha256("".join(f"{part}\n" for part in parts).encode()).hexdigest()


def environment_criterion(profile: str, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of this machine's environment that can change a gate's result and that its programs are given
    (:func:`ci.environment.recorded_environment`: GGML_*, LLAMA_*, LD_*, VK_*, HIP_*, CUDA_*, ..., ONEBIT_PASS_ENV's and
    the profile's own), by name: a pass under GGML_VK_DISABLE_GRAPH_OPTIMIZE=1 does not count for a ship without it."""
    found = profiles.PROFILES.get(profile)
    return recorded_environment(source, found.variables if found is not None else ())


def current_criteria(pins: Pins, gate: str, profile: str, ci_sha256: str | None = None) -> dict[str, Any]:
    """What ``gate`` must have judged against for a build of ``pins`` and ``profile``, now: its own criteria (the
    gate's :meth:`~ci.gates.protocol.Gate.criteria`), the environment its programs would run in, and the
    orchestration's digest (``ci_sha256`` when the caller has worked it out already). A name no gate has wants what no
    record can give."""
    found = registry.by_name(gate)
    own = found.criteria(pins, profile) if found is not None else {"gate": NO_SUCH_GATE.format(gate=gate)}
    return {**own, "environment": environment_criterion(profile), "ci_sha256": ci_sha256 or orchestration_sha256()}


CriteriaNow = Callable[[str], Mapping[str, Any]]


def criteria_now(pins: Pins, profile: str) -> CriteriaNow:
    """:func:`current_criteria` of each gate, worked out once: ship judges every record of a gate against the same
    criteria, and some read files (the launcher's digest, the committed faults)."""
    ci_sha256 = orchestration_sha256()  # one read of ci/ for every gate, not one per gate
    return functools.cache(lambda gate: current_criteria(pins, gate, profile, ci_sha256))


def judged_criteria(pins: Pins, result: GateResult, profile: str, ci_sha256: str | None = None) -> dict[str, Any]:
    """What ``result`` was judged against: from the result itself where the gate says (the equivalence run's tokens
    and floors, the architectures archs ran, the self-test's fault set), else from the pins.yaml it ran under and, for
    the route and equivalence gates, the launcher (and the route tests) as they are when the record is written, right
    after the gate."""
    found = registry.by_name(result.gate)  # none for a record ship never counts (the gfx1151 compile record)
    judged = found.judged(result, pins, profile) if found is not None else {}
    now = orchestration_sha256()
    if ci_sha256 is not None and now != ci_sha256:
        raise Refused(CI_CHANGED.format(judged=ci_sha256[:12], now=now[:12]))
    return {**judged, "environment": environment_criterion(profile), "ci_sha256": now}


def judging_now() -> str:
    """The digest of ci/ and serve/ as the gates start, every module of ci.gates imported first and the digest
    unchanged since the command started: a judge is then the code the digest read, whatever a program the gates start
    (the fork's, under test) writes into either package afterwards, or a planted module put back as it was imported."""
    import importlib
    import pkgutil

    import ci.gates

    started = tuple(at_start(d) for d in orchestration_dirs())  # as the command started, when the CLI took them
    before = orchestration_sha256(tuple(s for s in started if s)) if all(started) else orchestration_sha256()
    for module in pkgutil.walk_packages(ci.gates.__path__, "ci.gates."):
        if not module.name.endswith(".task_driver"):  # the KernelForge task's standalone script
            importlib.import_module(module.name)
    now = orchestration_sha256()
    if now != before:
        raise Refused(CI_CHANGED.format(judged=before[:12], now=now[:12]))
    return now


def context_of(pins: Pins, manifest: Manifest, ci_sha256: str | None = None) -> ledger.BuildContext:
    """The ledger context of a gate run on ``manifest``'s build: its identity, its digest, and each gate's criteria.
    ``ci_sha256``: the digest of ci/ and serve/ when the gates started (:func:`judging_now`); a record is written only when
    it is still that, so code that edits ci/ while the gates run and puts it back before the record never counts."""

    def judged(result: GateResult) -> Mapping[str, Any]:
        return judged_criteria(pins, result, manifest.profile, ci_sha256)

    return ledger.BuildContext(
        manifest.key, manifest.pin_commit, manifest.series_digest, manifest.profile, manifest.device, manifest.digest, judged
    )


def why_not_counted(record: ledger.Record, manifest: Manifest, pins: Pins, now: CriteriaNow | None = None) -> str | None:
    """None when ``record`` judged exactly this build's binaries against today's criteria; else, in a few words, why
    it does not count. ``now`` gives a gate's criteria today (:func:`criteria_now`: once per gate, not per record)."""
    data = record.data
    recorded = str(data.get("manifest_sha256", ""))
    if not recorded:
        return "it names no binaries (recorded before records did): run the gate again"
    if recorded != manifest.digest:
        return OTHER_BINARIES.format(recorded=recorded[:12], current=manifest.digest[:12])
    gate = registry.by_name(record.gate)
    if gate is None:
        return NO_SUCH_GATE.format(gate=record.gate)
    if (why := gate.why_not_counted(data.get("properties") or {}, manifest)) is not None:
        return why
    if (why := other_libraries(data.get("properties") or {}, manifest)) is not None:
        return why
    want = (now or criteria_now(pins, manifest.profile))(record.gate)
    got = data.get("criteria")
    if not isinstance(got, Mapping) or data.get("criteria_sha256") != ledger.criteria_digest(got):
        return "its criteria are missing or do not match their digest"
    if dict(got) != want:
        changed = [k for k in sorted({*want, *got}) if got.get(k) != want.get(k)]
        shown = "; ".join(CRITERION_CHANGED.format(criterion=k, judged=_short(got.get(k)), current=_short(want.get(k))) for k in changed)
        return OTHER_CRITERIA.format(changes=shown)
    return None


def other_libraries(properties: Mapping[str, Any], manifest: Manifest) -> str | None:
    """Why a record whose programs mapped a library of another sha256 than the build's does not count, or None."""
    for item in str(properties.get(LOADED_PROPERTY, "")).split(","):
        name, _, sha = item.partition("=")
        built = manifest.libraries.get(name)
        if name and (built is None or built.sha256 != sha):
            return OTHER_LIBRARIES.format(name=name, ran=sha[:12], build=built.sha256[:12] if built else "none")
    return None


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


JudgedCriteria = Callable[[GateResult], Mapping[str, Any]]
