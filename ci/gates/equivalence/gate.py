"""The equivalence gate's adapter: greedy output with the drafter equals the output without it, required for every
build; on the tiny generated models (the engine's qwen35 class with both drafter kinds) unless pins.yaml or the options
name models, and bound to the tokens, floors, near-tie, spec type, prompts and launcher it ran with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci.gates.equivalence import NAME
from ci.gates.protocol import Flags, GateBase

if TYPE_CHECKING:
    from ci.compile.manifest import Manifest
    from ci.gates.results import GateResult
    from ci.gates.target import BuildUnderTest, GateOptions
    from ci.pin.pins import Pins

RAN_OTHER_SERVER = "it ran llama-server {ran}, not the build's {build}"


class EquivalenceGate(GateBase):
    name = NAME
    flags = Flags(on_models=True, binds_model_files=True)

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates.equivalence import engine_path, run
        from ci.gates.equivalence import plan as eq_plan
        from ci.gates.serving.model_sets import served_models

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
        model, drafter, models = served_models(target, options)
        equivalence_plan = eq_plan.plan(
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
        return run.run(equivalence_plan, out / "equivalence-logs")

    def figures(self, metrics: Mapping[str, float], properties: Mapping[str, Any], criteria: Mapping[str, Any]) -> list[str]:
        """Each drafter leg's acceptance and tokens per step."""
        return [f"{key} {metrics[key]:.3g}" for key in sorted(metrics) if key.rsplit(".", 1)[-1] in ("acceptance", "tokens_per_step")]

    def criteria(self, pins: Pins, profile: str) -> dict[str, Any]:
        from ci.gates.serving.launcher import launcher_sha256

        config = pins.equivalence
        return {
            "tokens": str(config.tokens),
            "floors": config.floors.describe(),
            "near_tie_nats": f"{config.near_tie_nats:g}",
            "spec_type": spec_type_of(pins),
            "prompts_sha256": committed_prompts_sha256(),  # an easier prompt set is a lower bar, like fewer tokens
            "launcher_sha256": launcher_sha256(),  # the legs run through 1bit serve
        }

    def judged(self, result: GateResult, pins: Pins, profile: str) -> dict[str, Any]:
        """The run's own tokens, floors, near-tie and prompts; the spec type is pins.yaml's, which no option overrides."""
        from ci.gates.serving.launcher import launcher_sha256

        props = dict(result.properties)
        judged = {k: props.get(k, "") for k in ("tokens", "floors", "near_tie_nats", "prompts_sha256")}
        return {**judged, "spec_type": spec_type_of(pins), "launcher_sha256": launcher_sha256()}

    def why_not_counted(self, properties: Mapping[str, Any], manifest: Manifest) -> str | None:
        server = manifest.binaries.get("llama-server")
        if server is not None and properties.get("llama_server_sha256") != server.sha256:
            return RAN_OTHER_SERVER.format(ran=str(properties.get("llama_server_sha256", ""))[:12], build=server.sha256[:12])
        return None


def spec_type_of(pins: Pins) -> str:
    """pins.yaml's ``equivalence.spec_type`` as a criterion: the drafting the gate's llama (or release) leg ran."""
    return pins.equivalence.spec_type or "the gate's default"


def committed_prompts_sha256() -> str:
    """The sha256 of the committed prompts (ci/prompts), the set the equivalence gate runs when given none."""
    from ci.gates.equivalence.plan import prompts_sha256
    from ci.gates.serving.prompts import load_prompts

    return prompts_sha256(load_prompts())


GATE = EquivalenceGate()
