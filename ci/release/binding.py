"""What binds a gate's record to what ship ships: the binaries it ran on and the criteria it judged against.

At gate time each record carries ``manifest_sha256`` (:attr:`Manifest.digest`: the build key and every binary's and
library's sha256) and ``criteria`` (what the gate judged against: the expected case counts; the token count, floors,
spec type and prompts; the architectures with their seed and threshold; the perf checks; the fault set; for route and
equivalence, the launcher's files; for route, the files that decide which route tests run; for every gate, the ci
package that ran and judged it) with its digest. At ship
time :func:`why_not_counted` compares them with the build.json ship reads, whose binaries it has just hashed again
(:meth:`Manifest.reproved`), and with the criteria pins.yaml, the committed faults and prompts, the launcher and its
route tests give now. A binary swapped with its sha256 rewritten in build.json, a count raised after gating, a
shorter equivalence run or one on other prompts, an archs run on fewer architectures, a launcher edited after its
tests ran, route tests run under a conftest edited for the run and put back, or a self-test on a user's one-fault file
no longer counts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ci import defaults
from ci.compile.manifest import Manifest
from ci.gates import route
from ci.gates.archs import SEED as ARCHS_SEED
from ci.gates.archs_judge import GATE as GATE_ARCHS
from ci.gates.archs_judge import THRESHOLD as ARCHS_THRESHOLD
from ci.gates.equivalence import GATE as GATE_EQUIVALENCE
from ci.gates.perf import GATE as GATE_PERF
from ci.gates.registry import SELFTEST
from ci.gates.results import GateResult
from ci.pin.pins import Pins
from ci.release import ledger

BACKEND_OPS = "backend_ops"

# Messages, shared with the tests that match on them (tests/support/messages.py): why a record does not count
OTHER_BINARIES = "it judged other binaries (manifest {recorded}, build.json now {current})"
OTHER_CRITERIA = "it judged other criteria than pins.yaml's and the committed faults' ({changes})"
CRITERION_CHANGED = "{criterion} {judged}, now {current}"  # OTHER_CRITERIA's changes, joined by "; "
ENOUGH_ROUNDS = "at least {rounds}"  # the perf gate's rounds as a criterion


def orchestration_dir() -> Path:
    """The ci package that runs and judges the gates: the one this Python imports (this checkout's)."""
    import ci

    return Path(ci.__file__).resolve().parent


def orchestration_sha256() -> str:
    """One digest of the ci package's files (as the launcher's are read, :func:`route.launcher_sha256`): every record
    is bound to the code that ran and judged it, so a judge weakened for a gate run and put back afterwards leaves
    records that do not count (a hostile pass on ship, 2026-12-05)."""
    return route.launcher_sha256(orchestration_dir())


def current_criteria(pins: Pins, gate: str, profile: str, ci_sha256: str | None = None) -> dict[str, Any]:
    """What ``gate`` must have judged against for a build of ``pins`` and ``profile``, now: its own criteria and the
    orchestration's digest (``ci_sha256`` when the caller has worked it out already)."""
    return {**_gate_criteria(pins, gate, profile), "ci_sha256": ci_sha256 or orchestration_sha256()}


def _gate_criteria(pins: Pins, gate: str, profile: str) -> dict[str, Any]:
    if gate == route.GATE:  # the launcher its tests judged is the one ship puts in the wheel, by the tests there now
        return {"launcher_sha256": route.launcher_sha256(), "route_tests_sha256": route.route_tests_sha256()}
    if gate == BACKEND_OPS:
        return {"expected": dict(sorted(pins.expected_cases().items()))}
    if gate == GATE_EQUIVALENCE:
        config = pins.equivalence
        return {
            "tokens": str(config.tokens),
            "floors": config.floors.describe(),
            "near_tie_nats": f"{config.near_tie_nats:g}",
            "spec_type": spec_type_of(pins),
            "prompts_sha256": committed_prompts_sha256(),  # an easier prompt set is a lower bar, like fewer tokens
            "launcher_sha256": route.launcher_sha256(),  # the legs run through 1bit serve
        }
    if gate == GATE_ARCHS:
        return {"archs": ",".join(dict.fromkeys(pins.archs)), "seed": str(ARCHS_SEED), "threshold": f"{ARCHS_THRESHOLD:g}"}
    if gate == GATE_PERF:
        checks = {models: [[c.text, c.floor, c.tolerance] for c in checks] for models, checks in pins.perf}
        # its figures are of llama-servers started through 1bit serve, with the launcher's recipes
        return {"checks": checks, "rounds": ENOUGH_ROUNDS.format(rounds=defaults.PERF_ROUNDS), "launcher_sha256": route.launcher_sha256()}
    if gate == SELFTEST:
        from ci.gates.selftest import committed_faults_sha256

        return {"faults_sha256": committed_faults_sha256(profile)}
    return {}


CriteriaNow = Callable[[str], Mapping[str, Any]]


def criteria_now(pins: Pins, profile: str) -> CriteriaNow:
    """:func:`current_criteria` of each gate, worked out once: ship judges every record of a gate against the same
    criteria, and some read files (the launcher's digest, the committed faults)."""
    ci_sha256 = orchestration_sha256()  # one read of ci/ for every gate, not one per gate
    return functools.cache(lambda gate: current_criteria(pins, gate, profile, ci_sha256))


def spec_type_of(pins: Pins) -> str:
    """pins.yaml's ``equivalence.spec_type`` as a criterion: the drafting the gate's llama (or release) leg ran."""
    return pins.equivalence.spec_type or "the gate's default"


def committed_prompts_sha256() -> str:
    """The sha256 of the committed prompts (ci/prompts), the set the equivalence gate runs when given none."""
    from ci.gates.equivalence import load_prompts, prompts_sha256

    return prompts_sha256(load_prompts())


def judged_criteria(pins: Pins, result: GateResult, profile: str) -> dict[str, Any]:
    """What ``result`` was judged against: from the result itself where the gate says (the equivalence run's tokens
    and floors, the architectures archs ran, the self-test's fault set), else from the pins.yaml it ran under and, for
    the route and equivalence gates, the launcher (and the route tests) as they are when the record is written, right
    after the gate."""
    return {**_judged_gate_criteria(pins, result, profile), "ci_sha256": orchestration_sha256()}


def _judged_gate_criteria(pins: Pins, result: GateResult, profile: str) -> dict[str, Any]:
    props = dict(result.properties)
    if result.gate == GATE_EQUIVALENCE:  # the spec type is pins.yaml's, which no option overrides
        judged = {k: props.get(k, "") for k in ("tokens", "floors", "near_tie_nats", "prompts_sha256")}
        return {**judged, "spec_type": spec_type_of(pins), "launcher_sha256": route.launcher_sha256()}
    if result.gate == GATE_PERF:  # the rounds it measured: enough, or how few
        rounds = props.get("rounds", "")
        enough = rounds.isdigit() and int(rounds) >= defaults.PERF_ROUNDS
        return {**_gate_criteria(pins, result.gate, profile), "rounds": ENOUGH_ROUNDS.format(rounds=defaults.PERF_ROUNDS) if enough else rounds}
    if result.gate == GATE_ARCHS:  # the architectures it ran, with its seed and threshold
        return {k: props.get(k, "") for k in ("archs", "seed", "threshold")}
    if result.gate == SELFTEST:
        return {"faults_sha256": props.get("faults_sha256", "")}
    return _gate_criteria(pins, result.gate, profile)


def context_of(pins: Pins, manifest: Manifest) -> ledger.BuildContext:
    """The ledger context of a gate run on ``manifest``'s build: its identity, its digest, and each gate's criteria."""

    def judged(result: GateResult) -> Mapping[str, Any]:
        return judged_criteria(pins, result, manifest.profile)

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
    props = data.get("properties") or {}
    server = manifest.binaries.get("llama-server")
    if record.gate == GATE_EQUIVALENCE and server is not None and props.get("llama_server_sha256") != server.sha256:
        return f"it ran llama-server {str(props.get('llama_server_sha256', ''))[:12]}, not the build's {server.sha256[:12]}"
    want = (now or criteria_now(pins, manifest.profile))(record.gate)
    got = data.get("criteria")
    if not isinstance(got, Mapping) or data.get("criteria_sha256") != ledger.criteria_digest(got):
        return "its criteria are missing or do not match their digest"
    if dict(got) != want:
        changed = [k for k in sorted({*want, *got}) if got.get(k) != want.get(k)]
        shown = "; ".join(CRITERION_CHANGED.format(criterion=k, judged=_short(got.get(k)), current=_short(want.get(k))) for k in changed)
        return OTHER_CRITERIA.format(changes=shown)
    return None


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


JudgedCriteria = Callable[[GateResult], Mapping[str, Any]]
