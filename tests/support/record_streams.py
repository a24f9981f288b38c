"""Record the real /completion answers the judge's unit tests replay (tests/gates/equivalence/data/streams.json).

    python -m tests.support.record_streams LLAMA_SERVER

Tiny models from ci.gates.tiny.models (the drafter leg: the near drafter), the committed ``short`` prompt, 64 tokens,
the gate's own request bodies (the end of generation ignored). Servers
are started as plain llama-server command lines (the recording does not depend on the launcher). Positions 27
and 45 are where the baseline's top-2 margin is at or under 0.1 nats (0.0653 and 0.0118 when recorded), so
the resume requests start after them.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from ci.gates.equivalence import judge as ej
from ci.gates.equivalence import plan as eq_plan
from ci.gates.serving import model_sets
from ci.gates.serving import prompts as prompt_set
from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports
from ci.gates.tiny.models import NEVER_ACCEPTED_DRAFTER, write_model, write_tiny_models

OUT = Path(__file__).resolve().parents[1] / "gates" / "equivalence" / "data" / "streams.json"
TOKENS = 64
RESUME_AFTER = (27, 45)  # near-tie positions of the tiny target's "short" run


def _trim(answer: dict[str, Any]) -> dict[str, Any]:
    probs = [
        {"id": p["id"], "token": p["token"], "logprob": p["logprob"], "top_logprobs": [{k: c[k] for k in ("id", "token", "logprob")} for c in p["top_logprobs"]]}
        for p in answer["completion_probabilities"]
    ]
    return {"tokens": answer["tokens"], "stop_type": answer["stop_type"], "timings": answer["timings"], "completion_probabilities": probs}


def main(llama_server: str) -> None:
    prompt = next(p for p in prompt_set.load_prompts() if p.name == "short")
    equivalence_plan = eq_plan.EquivalencePlan(baseline=eq_plan.Leg("baseline", Path()), drafter=eq_plan.Leg("drafter", Path()), prompts=(prompt,), llama_server=Path(llama_server))
    with tempfile.TemporaryDirectory() as tmp:
        models = write_tiny_models(Path(tmp))
        draft = ["-md", str(models.near_drafter), "--spec-type", "draft-simple", *model_sets.DRAFT_ARGS]
        never = write_model(Path(tmp) / "never.gguf", NEVER_ACCEPTED_DRAFTER)
        legs = {
            "baseline": [str(models.target)],
            "drafter": [str(models.target), *draft],
            "other_target": [str(models.other_target), *draft],
            "never_drafts": [str(models.target), "-md", str(models.near_drafter), "--spec-type", "none"],
            "never_accepted": [str(models.target), "-md", str(never), "--spec-type", "draft-simple", *model_sets.DRAFT_ARGS],
        }
        record: dict[str, Any] = {"prompt": prompt.text, "tokens": TOKENS, "answers": {}}
        for name, (model, *extra) in legs.items():
            (port,) = free_ports(1)
            argv = (llama_server, "-m", model, "-ngl", "0", "-c", "2048", "--host", "127.0.0.1", "--port", str(port), *extra)
            with LlamaServer(ServerLaunch(name, argv, "127.0.0.1", port), Path(tmp) / f"{name}.log") as server:
                base = server.completion(equivalence_plan.body(prompt, ej.Resume((), TOKENS)))
                record["answers"][f"{name}@0"] = _trim(base)
                if name == "baseline":
                    ids = base["tokens"]
                for after in RESUME_AFTER if name in ("baseline", "drafter") else ():
                    resume = ej.Resume(tuple(ids[: after + 1]), TOKENS - after - 1)
                    record["answers"][f"{name}@{after + 1}"] = _trim(server.completion(equivalence_plan.body(prompt, resume)))
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(Path.cwd()) if OUT.is_relative_to(Path.cwd()) else OUT.name}")


if __name__ == "__main__":
    main(sys.argv[1])
