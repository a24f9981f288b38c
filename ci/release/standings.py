"""Which record of the ledger stands for a build and a gate: the one reading that ship, the self-test and bisect ask.

A record counts when it is of this build's key, on the models the release is judged on (pins.yaml's by sha256, or the
tiny generated ones), and, given ``why_not`` (:func:`ci.release.binding.why_not_counted`), judged exactly this build's
binaries against today's criteria. A later failure overrides an earlier pass, and a FAILED record of this build's
binaries stands whatever the criteria it ran under, until a pass under today's criteria comes after it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ci import scratch
from ci.compile.manifest import Manifest
from ci.gates import registry
from ci.gates.protocol import Flags
from ci.gates.registry import always
from ci.gates.results import Status
from ci.gates.serving.model_sets import RELEASE_MODELS, TINY_MODELS
from ci.pin.pins import EquivalenceConfig, Pins
from ci.release import binding
from ci.release import ledger as ledger_mod
from ci.words import AND_MORE

SHIP = "ship"  # the ledger's record of a release
COUNTED = "counted.{gate}"  # a ship record's property: the ledger line of the gate's record that counted for it

# Messages, shared with the tests that match on them (tests/support/messages.py)
MODELS_TAG = " [{models}]"  # a counted equivalence or perf record's detail ends with the models it ran on
NOT_COUNTED = "; not counted: {why} (ledger line {line}{more})"  # the last record that does not count
OTHER_MODELS = "models {models}"  # NOT_COUNTED's why for a record on other models than the release's
# OTHER_MODELS' kin for a record on the tiny models: one of its files is not what the generator writes
NOT_THE_GENERATORS = "models: {key} {got} is not the generator's {file}"
NOT_A_GENERATED_FILE = "models: {key} names {file}, no file the tiny models' generator writes"
NO_MODEL_DIGEST = "models: it names no model's sha256"
# a FAILED record of this build's binaries under other criteria, newer than any that counts: it stands
FAILED_ELSEWHERE = "; it FAILED under other settings: {why} (ledger line {line}): a pass under today's criteria after it counts"
NO_COUNTED_RECORD = "no record {what} for this build: run nox -s gpu_tests{note}"
ON_MODELS = "on the {models}"  # NO_COUNTED_RECORD's what, for an equivalence or perf gate
THAT_COUNTS = "that counts"  # NO_COUNTED_RECORD's what, for any other gate
STALE_RECORD = "no record for this build; the last ({verdict}, line {line}) judged key {key}"
NO_RECORD = "no record: run nox -s gpu_tests"
# NOT_COUNTED's why for a perf record judged against another release than the last one now (each RELEASE_AT or NO_RELEASE)
OTHER_BASELINE = "it compared with {judged}, and the last release now is {now}: run the perf gate again"
RELEASE_AT = "the release of pin {pin}"
NO_RELEASE = "no release"


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
    """Where each required gate stands for the build ``key``, from the ledger's records (pure). A record counts when
    it is on the models the release is judged on (:func:`counted_models`) and ``why_not`` (binding.why_not_counted)
    finds nothing against it; a FAILED record that ``failed_here`` (this build's binaries), newer than the one that
    counts, stands whatever the settings it ran under (:data:`FAILED_ELSEWHERE`)."""
    out = []
    models = counted_models(release)
    for gate in always() if required is None else required:
        mine = [r for r in ledger.records if r.gate == gate and r.build_key == key]
        reasons: dict[int, str] = {}
        other_models: set[int] = set()  # records of another test than the release's: never held against it
        for r in mine:
            if flags_of(gate).on_models and (off := _off_models(r, models, release)) is not None:
                reasons[r.line] = off
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


def _off_models(rec: ledger_mod.Record, models: str, release: EquivalenceConfig | None) -> str | None:
    """Why ``rec`` did not run on the models the release is judged on, or None: on other models; on other files than
    pins.yaml's sha256 name (the equivalence record names both); on the tiny models, a file that is not the
    generator's (a drafter renamed over before it was hashed)."""
    props = rec.data.get("properties") or {}
    if props.get("models") != models:
        return OTHER_MODELS.format(models=_models_of(rec))
    if not flags_of(rec.gate).binds_model_files:
        return None
    if models == TINY_MODELS:
        return model_files_problem(props)
    if release is None or release.model is None or release.drafter is None:
        return None
    want = {"model_sha256": release.model.sha256, "drafter_sha256": release.drafter.sha256}
    return None if all(props.get(k) == v for k, v in want.items() if v is not None) else OTHER_MODELS.format(models=_models_of(rec))


def model_files_problem(props: Mapping[str, Any]) -> str | None:
    """Why a record on the tiny models does not name exactly the generator's files, or None: each model digest it
    gives (``model_sha256``, ``<leg>.drafter_sha256``, ...) beside the file it names (``model``, ``<leg>.drafter``)."""
    keys = sorted(k for k in props if k in ("model_sha256", "drafter_sha256") or k.endswith((".model_sha256", ".drafter_sha256")))
    if not keys:
        return NO_MODEL_DIGEST
    digests = tiny_digests()
    for key in keys:
        name = os.path.basename(str(props.get(key.removesuffix("_sha256")) or ""))
        if name not in digests:
            return NOT_A_GENERATED_FILE.format(key=key.removesuffix("_sha256"), file=name or "no file")
        if props[key] != digests[name]:
            return NOT_THE_GENERATORS.format(key=key, got=str(props[key])[:12], file=name)
    return None


@functools.cache
def tiny_digests() -> dict[str, str]:
    """The sha256 of each tiny model the generator writes, by file name (written once into a private folder: 0.2 s)."""
    from ci.gates.tiny import models as tiny

    with tempfile.TemporaryDirectory(prefix=scratch.prefix("tiny")) as folder:
        tiny.write_tiny_models(Path(folder))
        tiny.write_qwen35_models(Path(folder))
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).iterdir()) if p.is_file()}


def for_build(book: ledger_mod.Ledger, manifest: Manifest, pins: Pins, required: Sequence[str]) -> tuple[GateStanding, ...]:
    """The one reading of the ledger for the build of ``manifest``: :func:`standings` with each record held to the
    binaries and the criteria of today (:func:`ci.release.binding.why_not_counted`), and to the last release for a gate
    that compares with one. Ship, the self-test (which gates fail the unplanted build) and bisect ask it."""
    profile, key = manifest.profile, manifest.key
    now = binding.criteria_now(pins, profile)
    models = counted_models(pins.equivalence)

    def baseline(gate: str) -> str:
        """The pin of the release a record of ``gate`` must have compared with: the last one now, or ""."""
        found = released_record(book, profile, key, gate, models if flags_of(gate).on_models else None)
        return found[0] if found is not None else ""

    def why_not(record: ledger_mod.Record) -> str | None:
        return binding.why_not_counted(record, manifest, pins, now) or other_baseline(record, baseline)

    def failed_here(record: ledger_mod.Record) -> bool:
        """A FAILED record of a gate this checkout has, that judged exactly this build's binaries."""
        judged = record.data.get("manifest_sha256")
        return record.verdict == Status.FAILED.value and judged == manifest.digest and registry.by_name(record.gate) is not None

    return standings(book, key, required, release=pins.equivalence, why_not=why_not, failed_here=failed_here)


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
