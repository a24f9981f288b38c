"""``nox -s bench``: A/B measurements of ``1bit serve`` configurations, the baseline measured in the same run (the
engine's tools/bench.py, done here).

Rounds interleave the configs (A B A B), each on a fresh server, so a drifting box (heat, other jobs) spreads over
every config alike. A run measures prompt and decode t/s in the plan's protocol (:mod:`ci.gates.serving.protocol`)
and holds the box lock (:func:`box_lock_path`), so it never measures beside the perf gate. Plan apart from run:
:func:`plan` is pure, :func:`run` starts the servers, :func:`summarise` and :func:`table` make the figures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import os
import platform
import random
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ci.errors import ServerFailed
from ci.files import cache_dir, write_json
from ci.gates.serving import drafting
from ci.gates.serving.bench_plan import PROMPT, BenchPlan, Run, check_configs
from ci.gates.serving.llama import LlamaServer, ServerFactory, default_server, free_ports
from ci.gates.serving.prompts import Prompt, load_prompts
from ci.gates.serving.protocol import SEEDS, chat_prompt
from ci.locks import held_lock

BOX_LOCK_VAR = "ONEBIT_BOX_LOCK"  # the shared box's lock file (default: onebit-ci's cache folder's box.lock)

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_TIMINGS = "{server} server: the answer has no timings"
TIMINGS_LACK = "{server} server: the answer's timings lack {phase}_n/_ms: {timings}"
WROTE = "bench: wrote {path}"
PROTOCOL_LINE = "{requests} (--protocol {protocol})"  # the table's first line: which protocol made its figures
PROMPT_MADE = "bench: prompt: {tokens} tokens by the model's own tokenizer{counted}"
PROMPT_NEAREST = "{made}, the nearest to the {asked} asked"  # made: PROMPT_MADE's
WITH_TEMPLATE = ", its chat template counted in"  # PROMPT_MADE's counted on the seeds' protocol
# the table: a CONFIG_COLUMN, then per metric a CELL, its CELL_INTERVAL, and CELL_CHANGE against the baseline
CONFIG_COLUMN = "config"
CELL = "{best:.1f} / {median:.1f}"
CELL_INTERVAL = " [{low:.1f}-{high:.1f}]"
CELL_CHANGE = " ({change:+.1f}%)"


# -- the lock ---------------------------------------------------------------------------------------------------


def box_lock_path() -> Path:
    """The box's lock, the bench's and the perf gate's alike: ``$ONEBIT_BOX_LOCK``, else the cache folder's box.lock."""
    given = os.environ.get(BOX_LOCK_VAR)
    return Path(given) if given else cache_dir() / "box.lock"


@contextlib.contextmanager
def box_lock(path: Path | None, say: Callable[[str], None]) -> Iterator[None]:
    """An exclusive flock on ``path`` for the whole block; a second holder waits and says who holds it. ``path`` is a
    lock file of its own: an existing file that is not one (not empty, not a holder line) is refused, never truncated."""
    if path is None:
        yield
        return
    with held_lock(path, "bench", "--lock", wait=True, say=say):
        yield


# -- the run ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    round: int
    config: str
    metric: str  # "prompt", "decode code", ...
    rep: int
    tokens: int  # prompt tokens processed, or tokens generated
    ms: float  # the server's own timing of that phase
    seconds: float  # wall time of the request, measured here
    draft_n: int = 0
    draft_n_accepted: int = 0
    draft_max: int = 0  # the config's draft length, from its launch line (0: no drafter, or none set)
    # a decode sample's share of the device's peak memory bandwidth per token a second: the model's weight bytes one
    # token reads over the peak (ci.gates.perf.real_shape; 0: not known)
    bandwidth_per_tps: float = 0.0

    @property
    def tps(self) -> float:
        return 1000.0 * self.tokens / self.ms if self.ms > 0 else 0.0

    @property
    def generated(self) -> int:
        """Tokens generated (0 for a prompt sample, of any prompt): what tokens/step counts."""
        return 0 if self.metric.startswith(PROMPT) else self.tokens

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round, "config": self.config, "metric": self.metric, "rep": self.rep, "tokens": self.tokens,
            "ms": round(self.ms, 3), "tps": round(self.tps, 3), "seconds": round(self.seconds, 4),
            "draft_n": self.draft_n, "draft_n_accepted": self.draft_n_accepted, "draft_max": self.draft_max,
            **({"bandwidth_per_tps": self.bandwidth_per_tps} if self.bandwidth_per_tps else {}),
        }  # fmt: skip


def sample_from(answer: Mapping[str, Any], run: Run, metric: str, rep: int, seconds: float, server: str) -> Sample:
    """One sample from an answer's ``timings`` (``/completion`` and chat completions alike); a :class:`ServerFailed`
    when they are missing."""
    t = answer.get("timings")
    if not isinstance(t, Mapping):
        raise ServerFailed(NO_TIMINGS.format(server=server))
    prompt = metric.startswith(PROMPT)  # "prompt", and a named prompt's ("prompt long")
    tokens, ms = (t.get("prompt_n"), t.get("prompt_ms")) if prompt else (t.get("predicted_n"), t.get("predicted_ms"))
    if not isinstance(tokens, int) or not isinstance(ms, int | float) or ms <= 0:
        raise ServerFailed(TIMINGS_LACK.format(server=server, phase="prompt" if prompt else "predicted", timings=dict(t)))
    return Sample(run.round, run.config.name, metric, rep, tokens, float(ms), seconds, int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0)))


@dataclass(frozen=True)
class ServerRun:
    round: int
    config: str
    start_seconds: float
    log: str
    warmup_seconds: float = 0.0  # the unmeasured warm-up requests (0: none)


@dataclass(frozen=True)
class BenchResult:
    plan: BenchPlan
    samples: tuple[Sample, ...]
    servers: tuple[ServerRun, ...]
    started: str
    finished: str
    seconds: float
    prompt_tokens: int = 0  # the long prompt's tokens by the model's own tokenizer (seeds: its chat template's too)


@dataclass(frozen=True)
class LongPrompt:
    """What the prompt samples send, made once on the first server: token ids (completion) or a user message
    (seeds), and its tokens by the model's tokenizer, as each prompt sample's ``prompt_n`` repeats them."""

    content: tuple[int, ...] | str
    tokens: int
    asked: int


def long_prompt(server: LlamaServer, bench_plan: BenchPlan) -> LongPrompt:
    """The plan's long prompt for this server's model: exactly ``prompt_tokens`` token ids, or a user message whose
    chat prompt is that long (:func:`~ci.gates.serving.protocol.chat_prompt`: exact unless the tokenizer moves
    every cut; then the nearest, and it says so)."""
    if bench_plan.protocol == SEEDS:
        filler = "\n\n".join(p.text for p in load_prompts())
        made = chat_prompt(lambda path, body: server.post(path, body, 60.0), bench_plan.prompt_tokens, filler, server.launch.name)
        return LongPrompt(made.content, made.tokens, made.asked)
    ids = prompt_ids(server, bench_plan.prompts, bench_plan.prompt_tokens)
    return LongPrompt(ids, len(ids), bench_plan.prompt_tokens)


def made_line(prompt: LongPrompt, protocol: str) -> str:
    made = PROMPT_MADE.format(tokens=prompt.tokens, counted=WITH_TEMPLATE if protocol == SEEDS else "")
    return made if prompt.tokens == prompt.asked else PROMPT_NEAREST.format(made=made, asked=prompt.asked)


def prompt_ids(server: LlamaServer, prompts: Sequence[Prompt], count: int) -> tuple[int, ...]:
    """Exactly ``count`` token ids of the model's own tokenizer: the prompts' text, repeated as often as needed."""
    text = "\n\n".join(p.text for p in prompts)
    ids = server.post("/tokenize", {"content": text}, 60.0).get("tokens")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
        raise ServerFailed(f"{server.launch.name} server: /tokenize gave no token ids for the long prompt")
    return tuple(ids[k % len(ids)] for k in range(count))


def run(
    bench_plan: BenchPlan,
    logs: Path,
    say: Callable[[str], None],
    factory: ServerFactory = default_server,
    launch_lines: Mapping[str, Sequence[str]] | None = None,
) -> BenchResult:
    """Every run of the schedule on a fresh server, always stopped and reaped. ``launch_lines`` (from
    :func:`check_configs`) give each config's draft length; without them, the config's own llama-server args do."""
    t0 = time.monotonic()
    started = _now()
    samples: list[Sample] = []
    servers: list[ServerRun] = []
    prompt: LongPrompt | None = None
    schedule = bench_plan.schedule()
    lines = launch_lines if launch_lines is not None else {c.name: c.extra for c in bench_plan.configs}
    draft_max = {name: drafting.draft_max_of(argv) for name, argv in lines.items()}
    for k, r in enumerate(schedule, 1):
        log_path = logs / f"round{r.round}-{r.config.name}.log"
        launch = bench_plan.launch(r, free_ports(1)[0])
        say(f"bench: [{k}/{len(schedule)}] round {r.round}, {r.config.name}: {r.config.show()}")
        with factory(launch, log_path, bench_plan.health_timeout) as server:
            if prompt is None:
                prompt = long_prompt(server, bench_plan)
                say(made_line(prompt, bench_plan.protocol))
            w0 = time.monotonic()
            for body in bench_plan.warmup_bodies(prompt.content):
                server.post(bench_plan.path, body, bench_plan.request_timeout)
            warmup = time.monotonic() - w0 if bench_plan.warmup_tokens else 0.0
            servers.append(ServerRun(r.round, r.config.name, server.seconds_to_healthy, str(log_path), warmup))
            for rep in range(1, bench_plan.prompt_reps + 1):
                body = bench_plan.prompt_body(prompt.content)
                samples.append(_ask(server, bench_plan.path, body, r, PROMPT, rep, bench_plan.request_timeout, draft_max.get(r.config.name, 0)))
            for decode in bench_plan.prompts:
                for rep in range(1, bench_plan.decode_reps + 1):
                    body = bench_plan.decode_body(decode)
                    samples.append(_ask(server, bench_plan.path, body, r, f"decode {decode.name}", rep, bench_plan.request_timeout, draft_max.get(r.config.name, 0)))
        mine = [s for s in samples if s.round == r.round and s.config == r.config.name]
        say("bench:   " + ", ".join(f"{m} {max(s.tps for s in mine if s.metric == m):.1f} t/s" for m in bench_plan.metrics))
    return BenchResult(bench_plan, tuple(samples), tuple(servers), started, _now(), time.monotonic() - t0, prompt.tokens if prompt else 0)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def _ask(server: LlamaServer, path: str, body: Mapping[str, Any], r: Run, metric: str, rep: int, timeout: float, draft_max: int) -> Sample:
    t0 = time.monotonic()
    answer = server.post(path, body, timeout)
    return dataclasses.replace(sample_from(answer, r, metric, rep, time.monotonic() - t0, server.launch.name), draft_max=draft_max)


# -- the figures (pure) ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    config: str
    metric: str
    best: float
    median: float
    samples: int
    change_pct: float | None  # the median against the baseline's median; None for the baseline itself
    acceptance: float | None = None  # draft_n_accepted / draft_n over the samples, when anything was drafted
    spread: Spread | None = None
    tokens_per_step: float | None = None  # generated tokens per target step (ci.gates.serving.drafting), when anything was drafted  # the interquartile range and a bootstrap 95% interval of the median

    def cell(self) -> str:
        text = CELL.format(best=self.best, median=self.median)
        if self.spread is not None:
            text += CELL_INTERVAL.format(low=self.spread.low, high=self.spread.high)
        return text if self.change_pct is None else text + CELL_CHANGE.format(change=self.change_pct)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"best": round(self.best, 3), "median": round(self.median, 3), "samples": self.samples}
        if self.spread is not None:
            out["iqr"] = [round(self.spread.q1, 3), round(self.spread.q3, 3)]
            out["median_95"] = [round(self.spread.low, 3), round(self.spread.high, 3)]
        out["change_pct"] = None if self.change_pct is None else round(self.change_pct, 2)
        if self.acceptance is not None:
            out["acceptance"] = round(self.acceptance, 4)
        if self.tokens_per_step is not None:
            out["tokens_per_step"] = round(self.tokens_per_step, 3)
        return out


def summarise(bench_plan: BenchPlan, samples: Sequence[Sample]) -> tuple[Figure, ...]:
    """Best and median t/s per config and metric over every round, and the median's change against the baseline's."""
    out = []
    base: dict[str, float] = {}
    for config in bench_plan.configs:
        for metric in bench_plan.metrics:
            mine = [s for s in samples if s.config == config.name and s.metric == metric]
            if not mine:
                continue
            rates = [s.tps for s in mine]
            median = statistics.median(rates)
            if config is bench_plan.baseline:
                base[metric] = median
            change = None if config is bench_plan.baseline or not base.get(metric) else 100.0 * (median / base[metric] - 1.0)
            drafted = sum(s.draft_n for s in mine)
            accepted = drafting.acceptance(drafted, sum(s.draft_n_accepted for s in mine)) if drafted else None
            per_step = None
            if drafted and metric != PROMPT:
                steps = sum(drafting.steps(s.tokens, s.draft_n, s.draft_n_accepted, s.draft_max) for s in mine)
                per_step = sum(s.tokens for s in mine) / steps if steps else 0.0
            out.append(Figure(config.name, metric, max(rates), median, len(mine), change, accepted, spread(rates), per_step))
    return tuple(out)


def table(bench_plan: BenchPlan, figures: Sequence[Figure]) -> str:
    """The engine's table under the protocol that made it: a row per config, ``best / median [95% interval of the
    median]`` t/s per metric, the change against the baseline."""
    rows = [[CONFIG_COLUMN, *bench_plan.metrics]]
    by = {(f.config, f.metric): f for f in figures}
    for config in bench_plan.configs:
        rows.append([config.name, *(by[(config.name, m)].cell() if (config.name, m) in by else "-" for m in bench_plan.metrics)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    caption = PROTOCOL_LINE.format(protocol=bench_plan.protocol, requests=bench_plan.described)
    return "\n".join([caption, *("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)])


def to_json(result: BenchResult, figures: Sequence[Figure]) -> dict[str, Any]:
    p = result.plan
    return {
        "model": str(p.model),
        "llama_server": str(p.llama_server),
        "device": p.device,
        "protocol": p.protocol,
        "protocol_requests": p.described,
        "configs": [{"name": c.name, "args": list(c.args)} for c in p.configs],
        "baseline": p.baseline.name,
        "rounds": p.rounds,
        "prompt_reps": p.prompt_reps,
        "decode_reps": p.decode_reps,
        "decode_tokens": p.decode_tokens,
        "prompt_tokens": p.prompt_tokens,
        "prompt_tokens_made": result.prompt_tokens,
        "warmup_tokens": p.warmup_tokens,
        "context": p.context,
        "prompts": [pr.name for pr in p.prompts],
        "started": result.started,
        "finished": result.finished,
        "seconds": round(result.seconds, 3),
        "host": platform.node(),
        "servers": [{"round": s.round, "config": s.config, "start_seconds": round(s.start_seconds, 3), "warmup_seconds": round(s.warmup_seconds, 3), "log": s.log} for s in result.servers],
        "samples": [s.to_json() for s in result.samples],
        "figures": {c.name: {f.metric: f.to_json() for f in figures if f.config == c.name} for c in p.configs},
    }


def print_report(result: BenchResult, out: TextIO) -> tuple[Figure, ...]:
    figures = summarise(result.plan, result.samples)
    p = result.plan
    print(
        f"bench: {p.model.name}, {p.rounds} round(s) x {len(p.configs)} config(s), the {p.protocol} protocol; t/s best / median [95% interval of the median]; "
        f"prompt {p.prompt_tokens} tokens x {p.prompt_reps}, decode {p.decode_tokens} tokens x {p.decode_reps}; change: median against {p.baseline.name}'s",
        file=out,
    )
    print(table(p, figures), file=out)
    for f in figures:
        if f.acceptance is not None and f.metric != PROMPT:
            per_step = f", {f.tokens_per_step:.2f} tokens/step" if f.tokens_per_step is not None else ""
            print(f"bench: {f.config} {f.metric}: acceptance {100 * f.acceptance:.1f}%{per_step}", file=out)
    return figures


def measure(
    bench_plan: BenchPlan, logs: Path, lock: Path | None, json_out: Path | None, say: Callable[[str], None]
) -> tuple[BenchResult, tuple[Figure, ...]]:
    """Every config through ``serve --dry-run`` first, then the rounds under the box's lock; the report, and the
    JSON record when asked."""
    lines = check_configs(bench_plan)
    with box_lock(lock, say):
        result = run(bench_plan, logs, say, launch_lines=lines)
    out = io.StringIO()
    figures = print_report(result, out)
    say(out.getvalue().rstrip("\n"))
    if json_out is not None:
        write_json(json_out, to_json(result, figures))
        say(WROTE.format(path=json_out))
    svg = json_out.with_suffix(".svg") if json_out is not None else logs.parent / "bench.svg"
    drawn = chart(result, svg)
    say(f"bench: chart {drawn}" if drawn else f"bench: chart {NO_CHART}")
    return result, figures


def chart(result: BenchResult, path: Path) -> Path | None:
    """Every sample per metric and config, the median marked, titled with the model and the rounds (matplotlib, the
    ``plot`` extra; None without it)."""
    plt = pyplot()
    if plt is None:
        return None
    p = result.plan
    metrics = list(p.metrics)
    figures = {(f.config, f.metric): f for f in summarise(p, result.samples)}
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.0 * len(metrics) + 0.6, 3.2), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        labels = []
        for x, config in enumerate(p.configs):
            ys = [s.tps for s in result.samples if s.metric == metric and s.config == config.name]
            ax.scatter([x + 0.04 * (k % 5 - 2) for k in range(len(ys))], ys, s=12, alpha=0.7)
            if ys:
                ax.hlines(statistics.median(ys), x - 0.25, x + 0.25, colors="black", linewidth=1)
            f = figures.get((config.name, metric))
            if f is not None and f.spread is not None:  # the median's 95% interval beside the samples
                ax.errorbar([x + 0.3], [f.median], yerr=[[f.median - f.spread.low], [f.spread.high - f.median]], fmt="_", color="black", capsize=3)
            labels.append(config.name if f is None or f.change_pct is None else f"{config.name}\n{f.change_pct:+.1f}%")
        ax.set_xticks(range(len(p.configs)), labels, fontsize=7)
        ax.set_ylim(bottom=0)  # a rate's axis from 0: a 2% change looks like one
        ax.set_title(metric, fontsize=8)
        ax.set_ylabel("t/s", fontsize=7)
    fig.suptitle(f"bench: {p.model.name}, {p.rounds} interleaved round(s), baseline {p.baseline.name}, the {p.protocol} protocol", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg")
    plt.close(fig)
    return path


# -- statistics and charts, shared with the perf gate -----------------------------------------------------------------

BOOTSTRAP = 2000


@dataclass(frozen=True)
class Spread:
    best: float
    median: float
    q1: float
    q3: float
    low: float  # bootstrap 95% interval of the median
    high: float
    n: int


def spread(values: Sequence[float], seed: int = 0) -> Spread:
    """Best, median, interquartile range and a bootstrap 95% interval of the median (seeded: the same samples give
    the same interval)."""
    xs = sorted(values)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0], xs[0], xs[0]]
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(BOOTSTRAP))
    return Spread(max(xs), statistics.median(xs), q[0], q[2], medians[int(0.025 * BOOTSTRAP)], medians[int(0.975 * BOOTSTRAP) - 1], len(xs))


def pyplot() -> Any:
    """matplotlib.pyplot, headless, or None without the plot extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: searchable, and the file small
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


NO_CHART = "not drawn: matplotlib is not installed (the plot extra: nox installs it for gpu_tests, the main job and bench; pip install '.[plot]')"
