"""The gates: one protocol, one registry, in the order ``nox -s gpu_tests`` runs them and ``nox -s ship`` requires them.

A gate takes the build under test (its manifest and the command's context) and returns a
:class:`~ci.gates.results.GateResult`; writing its record (JSON, JUnit, ledger) is the release stage's, in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ci.compile.context import Context
from ci.compile.stage import CurrentBuild
from ci.errors import ConfigError, Refused
from ci.files import sha256_cached
from ci.gates import archs, backend_ops, engine_path, equivalence, route, tinymodels
from ci.gates.results import GateResult
from ci.pin.pins import Pins
from ci.schema import did_you_mean


@dataclass(frozen=True)
class GateOptions:
    timeout: float = backend_ops.DEFAULT_TIMEOUT  # seconds per test-backend-ops run
    rounds: int = 5  # the perf gate's rounds (docs/bench.md: how many give a stable verdict)
    model: Path | None = None  # the equivalence gate's target; default pins.yaml, else tiny models
    drafter: Path | None = None
    tokens: int | None = None
    planted: bool = False  # a gate_selftest build: a fault planted in a copy of the checkout (DirtyRule.PLANTED)


@dataclass(frozen=True)
class BuildUnderTest:
    ctx: Context
    build: CurrentBuild

    @property
    def key(self) -> str:
        return self.build.key


class Gate(Protocol):
    name: str

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult: ...


class RouteGate:
    name = route.GATE

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        return route.route_gate(out)


class BackendOpsGate:
    name = backend_ops.GATE

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        ctx, manifest = target.ctx, target.build.manifest
        series = ctx.series
        # ggml's build commit says -dirty exactly when the checkout's ggml/ differs from the pin: the series touches it
        dirty = backend_ops.DirtyRule.DIRTY if series.touches("ggml/") else backend_ops.DirtyRule.CLEAN
        if options.planted:
            dirty = backend_ops.DirtyRule.PLANTED
        return backend_ops.run_gate(
            manifest.binary(target.build.build_dir, "test-backend-ops"),
            manifest.device,
            ctx.pins.expected_cases(),
            ctx.pins.fork.commit,
            bool(series.patches),
            options.timeout,
            out / "backend_ops-logs",
            manifest.key,
            dirty=dirty,
        )


class EquivalenceGate:
    name = equivalence.GATE

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        ctx, manifest = target.ctx, target.build.manifest
        config = ctx.pins.equivalence
        if (options.model is None or options.drafter is None) and (config.model is None or config.drafter is None):
            # the tiny generated models: the engine's class, a qwen35 target with the near and the DFlash drafter
            return engine_path.gate(
                target.build.build_dir,
                manifest.binary(target.build.build_dir, "llama-server"),
                out,
                device=ctx.profile(manifest.profile).serve_device,
                tokens=options.tokens or config.tokens,
                near_tie=config.near_tie_nats,
                build_key=manifest.key,
                llama_server_sha256=manifest.binaries["llama-server"].sha256,
                floors=config.floors,
            )
        model, drafter, models = equivalence_models(ctx, options, target.build.build_dir)
        equivalence_plan = equivalence.plan(
            model=model,
            drafter=drafter,
            llama_server=manifest.binary(target.build.build_dir, "llama-server"),
            spec_type=config.spec_type,
            tokens=options.tokens or config.tokens,
            near_tie=config.near_tie_nats,
            device=ctx.profile(manifest.profile).serve_device,
            build_key=manifest.key,
            llama_server_sha256=manifest.binaries["llama-server"].sha256,
            models=models,
            floors=config.floors,
        )
        return equivalence.run(equivalence_plan, out / "equivalence-logs")


def equivalence_models(ctx: Context, options: GateOptions, build_dir: Path) -> tuple[Path, Path, str]:
    """The target and drafter the equivalence gate runs, and what they are: ``--model``/``--drafter``, else the
    release models pins.yaml names (each checked against its sha256), else the tiny generated ones (the near drafter)."""
    config = ctx.pins.equivalence
    if options.model is not None and options.drafter is not None:
        return options.model, options.drafter, equivalence.GIVEN_MODELS
    if config.model is not None and config.drafter is not None:
        paths = []
        for key, ref in (("model", config.model), ("drafter", config.drafter)):
            path = ctx.root / ref.path
            if not path.is_file():
                raise ConfigError(f"pins.yaml: equivalence.{key}.path: {ref.path}: no such file; put the model there or fix the path")
            if ref.sha256 is not None and sha256_cached(path) != ref.sha256:
                raise Refused(f"pins.yaml: equivalence.{key}: {ref.path} has sha256 {sha256_cached(path)[:12]}, not {ref.sha256[:12]}: another file than the release's")
            paths.append(path)
        return paths[0], paths[1], equivalence.RELEASE_MODELS
    models = tinymodels.write_tiny_models(build_dir / "tiny-models")
    return models.target, models.near_drafter, equivalence.TINY_MODELS


class ArchsGate:
    """The fork's whole-model check, test-llama-archs, per architecture of pins.yaml expect.archs (ci/gates/archs.py)."""

    name = archs.GATE

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        m, build_dir = target.build.manifest, target.build.build_dir
        return archs.gate(m.binary(build_dir, "test-llama-archs"), m.binary(build_dir, "llama-server"), m.device, target.ctx.pins.archs, min(options.timeout, archs.TIMEOUT), out, m.key)


class PerfGate:
    """The seeds' performance claims (pins.yaml expect.perf), measured by the bench on the build's llama-server."""

    name = "perf"
    shows_cases = True  # gpu_tests prints each check's figures

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates import perf_run

        return perf_run.run(target, options, out)


GATES: tuple[Gate, ...] = (RouteGate(), BackendOpsGate(), EquivalenceGate())
NAMES: tuple[str, ...] = tuple(g.name for g in GATES)
OPTIONAL: tuple[Gate, ...] = (ArchsGate(), PerfGate())  # run when asked (--gate NAME) or when pins.yaml expects it
SELFTEST = "gate_selftest"  # its own session (it plants faults and rebuilds); ship requires it when pins.yaml says so


def required(pins: Pins) -> tuple[str, ...]:
    """Every gate ship requires for a build of ``pins``, in the order gpu_tests runs them: the three always, perf
    when pins.yaml declares checks (expect.perf) or requires it, the self-test when release.require names it."""
    extra = {*pins.release_require, *(("perf",) if pins.perf else ())}
    return (*NAMES, *(g.name for g in OPTIONAL if g.name in extra), *((SELFTEST,) if SELFTEST in extra else ()))


def select(names: Sequence[str], pins: Pins) -> tuple[Gate, ...]:
    """The gates named, or every gate ship requires (but the self-test, a session of its own) when none is, in order."""
    known = (*NAMES, *(g.name for g in OPTIONAL))
    for n in names:
        if n not in known:
            raise ConfigError(f"--gate {n}: unknown gate{did_you_mean(n, known)}; gates: {', '.join(known)}")
    wanted = set(names) if names else set(required(pins))
    return tuple(g for g in (*GATES, *OPTIONAL) if g.name in wanted)
