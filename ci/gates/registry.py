"""The gates: one registry, in the order ``nox -s gpu_tests`` runs them and ``nox -s ship`` requires them. Each gate
declares its name, whether ship requires it (always, or when pins.yaml asks), and how it runs on a build; gpu_tests,
ship, the main job, the self-test and pins.yaml's ``release.require`` all read :data:`GATES`. Adding a gate is its
module and one line there.

A gate takes the build under test (:class:`BuildUnderTest`: the build and what it is judged against, as values) and
returns a :class:`~ci.gates.results.GateResult`; writing its record (JSON, JUnit, ledger) is the release stage's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ci.errors import ConfigError, Refused
from ci.gates import names
from ci.schema import did_you_mean

if TYPE_CHECKING:  # each gate's module is imported when it runs: a job resolves with the names alone
    from ci.gates.results import GateResult
    from ci.gates.target import BuildUnderTest, GateOptions
    from ci.pin.pins import Pins

# Messages, shared with the tests that match on them (tests/support/messages.py)
# suggestion: ci.schema's did-you-mean, or nothing; known: the gates it may name, joined by ", "
NOT_REQUIRABLE = '{file}: release.require[{index}]: "{gate}" is not a gate ship can require{suggestion}; known: {known}'
UNKNOWN_GATE = "--gate {gate}: unknown gate{suggestion}; gates: {known}"


class Gate(Protocol):
    name: str

    def required(self, pins: Pins) -> bool:
        """Whether ship requires this gate for a build of ``pins``."""
        ...

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult: ...


class Always:
    """A gate ship requires for every build."""

    def required(self, pins: Pins) -> bool:
        return True


class WhenRequired:
    """A gate ship requires when pins.yaml's ``release.require`` names it."""

    name: str

    def required(self, pins: Pins) -> bool:
        return self.name in pins.release_require


class RouteGate(Always):
    name = names.ROUTE
    plantable = False  # the launcher's own tests: no planted fault of the fork can reach them

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates import route

        return route.route_gate(out)


class BackendOpsGate(Always):
    name = names.BACKEND_OPS

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates import backend_ops

        manifest = target.build.manifest
        # ggml's build commit says -dirty exactly when the checkout's ggml/ differs from the pin: the series touches it
        dirty = backend_ops.DirtyRule.DIRTY if target.ggml_touched else backend_ops.DirtyRule.CLEAN
        if options.planted:
            dirty = backend_ops.DirtyRule.PLANTED
        return backend_ops.run_gate(
            manifest.binary(target.build.build_dir, "test-backend-ops"),
            manifest.device,
            target.pins.expected_cases(),
            target.pins.fork.commit,
            target.patched,
            options.timeout,
            out / "backend_ops-logs",
            manifest.key,
            dirty=dirty,
        )


class EquivalenceGate(Always):
    name = names.EQUIVALENCE

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates import engine_path, equivalence
        from ci.gates.target import equivalence_models

        manifest = target.build.manifest
        config = target.pins.equivalence
        if (options.model is None or options.drafter is None) and (config.model is None or config.drafter is None):
            # the tiny generated models: the engine's class, a qwen35 target with the near and the DFlash drafter
            return engine_path.gate(
                target.build.build_dir,
                manifest.binary(target.build.build_dir, "llama-server"),
                out,
                device=target.serve_device,
                tokens=options.tokens or config.tokens,
                near_tie=config.near_tie_nats,
                build_key=manifest.key,
                llama_server_sha256=manifest.binaries["llama-server"].sha256,
                floors=config.floors,
                spec_type=config.spec_type,
            )
        model, drafter, models = equivalence_models(target, options)
        equivalence_plan = equivalence.plan(
            model=model,
            drafter=drafter,
            llama_server=manifest.binary(target.build.build_dir, "llama-server"),
            spec_type=config.spec_type,
            tokens=options.tokens or config.tokens,
            near_tie=config.near_tie_nats,
            device=target.serve_device,
            build_key=manifest.key,
            llama_server_sha256=manifest.binaries["llama-server"].sha256,
            models=models,
            floors=config.floors,
        )
        return equivalence.run(equivalence_plan, out / "equivalence-logs")


class ArchsGate(WhenRequired):
    """The fork's whole-model check, test-llama-archs, per architecture of pins.yaml expect.archs (ci/gates/archs.py)."""

    name = names.ARCHS

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates import archs

        m, build_dir = target.build.manifest, target.build.build_dir
        return archs.gate(m.binary(build_dir, "test-llama-archs"), m.binary(build_dir, "llama-server"), m.device, target.pins.archs, min(options.timeout, archs.TIMEOUT), out, m.key)


class PerfGate:
    """The seeds' performance claims (pins.yaml expect.perf), measured by the bench on the build's llama-server."""

    name = names.PERF
    shows_cases = True  # gpu_tests prints each check's figures
    plantable = False  # it measures speed, not what a planted fault breaks

    def required(self, pins: Pins) -> bool:
        return bool(pins.perf) or self.name in pins.release_require

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates import perf_run

        return perf_run.run(target, options, out)


class SelftestGate(WhenRequired):
    """``nox -s gate_selftest``: planted faults, each gate catching its own. A session of its own (it plants faults and
    rebuilds), so gpu_tests never runs it; ship requires its record when pins.yaml's release.require names it."""

    name = names.SELFTEST
    own_session = True

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        raise Refused(f"{self.name} runs in its own session: nox -s gate_selftest")


GATES: tuple[Gate, ...] = (RouteGate(), BackendOpsGate(), EquivalenceGate(), ArchsGate(), PerfGate(), SelftestGate())
SELFTEST = SelftestGate.name


def runnable() -> tuple[str, ...]:
    """The gates gpu_tests can run on a build (not those with a session of their own)."""
    return tuple(g.name for g in GATES if not getattr(g, "own_session", False))


def always() -> tuple[str, ...]:
    """The gates ship requires for every build: what a benign planted edit must pass."""
    return tuple(g.name for g in GATES if isinstance(g, Always))


def plantable() -> tuple[str, ...]:
    """The gates a planted fault may name: those that judge whether a build's binaries are right (the route tests judge
    the launcher, perf their speed)."""
    return tuple(g.name for g in GATES if not getattr(g, "own_session", False) and getattr(g, "plantable", True))


def requirable() -> tuple[str, ...]:
    """What pins.yaml's release.require may name."""
    return tuple(g.name for g in GATES if not isinstance(g, Always))


def check_require(pins: Pins) -> None:
    """pins.yaml's release.require names only gates of this registry."""
    known = requirable()
    for i, gate in enumerate(pins.release_require):
        if gate not in known:
            raise ConfigError(NOT_REQUIRABLE.format(file=pins.path.name, index=i, gate=gate, suggestion=did_you_mean(gate, known), known=", ".join(known)))


def required(pins: Pins) -> tuple[str, ...]:
    """Every gate ship requires for a build of ``pins``, in the order gpu_tests runs them."""
    return tuple(g.name for g in GATES if g.required(pins))


def select(wanted: Sequence[str], pins: Pins) -> tuple[Gate, ...]:
    """The gates named, or every gate ship requires (but those with a session of their own) when none is, in order."""
    runnable = tuple(g for g in GATES if not getattr(g, "own_session", False))
    known = tuple(g.name for g in runnable)
    for n in wanted:
        if n not in known:
            raise ConfigError(UNKNOWN_GATE.format(gate=n, suggestion=did_you_mean(n, known), known=", ".join(known)))
    chosen = set(wanted) if wanted else set(required(pins))
    return tuple(g for g in runnable if g.name in chosen)
