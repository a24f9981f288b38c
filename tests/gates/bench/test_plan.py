"""The bench's plan and figures, pure: configs, the schedule, the request bodies, samples, medians and the table."""

from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ci import locks
from ci.errors import ConfigError, ServerFailed
from ci.gates.serving import bench, model_sets, protocol
from ci.gates.serving import bench_plan as plans
from ci.gates.serving.llama import LAUNCHER
from ci.gates.serving.prompts import Prompt, load_prompts
from ci.gates.tiny.models import TinyModels
from tests.support.messages import partly, pattern

PROMPTS = (Prompt("code", "def f():"), Prompt("prose", "Once"), Prompt("short", "Hi"))


def test_a_config_is_serve_options_then_llama_server_args_after_the_double_dash() -> None:
    assert plans.parse_config("base=") == plans.BenchConfig("base")
    c = plans.parse_config("dflash=--dflash 'my drafts/D.gguf' --mtp-max 7 -- -ub 512 --spec-draft-p-min 0.5")
    assert c == plans.BenchConfig("dflash", ("--dflash", "my drafts/D.gguf", "--mtp-max", "7"), ("-ub", "512", "--spec-draft-p-min", "0.5"))
    assert c.args == ("--dflash", "my drafts/D.gguf", "--mtp-max", "7", "--", "-ub", "512", "--spec-draft-p-min", "0.5")
    assert c.show() == "--dflash 'my drafts/D.gguf' --mtp-max 7 -- -ub 512 --spec-draft-p-min 0.5"
    assert plans.BenchConfig("base").show() == "(serve's defaults)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("base", plans.NOT_NAME_ARGS.format(text="base")),
        ("=--dflash D", plans.NOT_NAME_ARGS.format(text="=--dflash D")),
        ("a b=x", plans.NOT_NAME_ARGS.format(text="a b=x")),
        ("q=--dflash 'D.gguf", plans.CONFIG_UNSPLITTABLE.format(name="q", args="--dflash 'D.gguf", reason="No closing quotation")),
        ("p=--port 9000", plans.OWNED_FLAG.format(name="p", flag="--port", why=plans.OWNED["--port"])),
        ("m=-m other.gguf", plans.OWNED_FLAG.format(name="m", flag="-m", why=plans.OWNED["-m"])),
        ("s=--llama-server=/bin/true", plans.OWNED_FLAG.format(name="s", flag="--llama-server", why=plans.OWNED["--llama-server"])),
    ],
)
def test_a_bad_config_names_itself(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        plans.parse_config(text)
    assert message in exc.value.message


def test_a_flag_after_the_double_dash_is_llama_servers_own() -> None:
    assert plans.parse_config("x=-- -ub 1024").extra == ("-ub", "1024")


def _plan(model: Path, **kw: object) -> plans.BenchPlan:
    kw.setdefault("configs", (plans.parse_config("base="), plans.parse_config("fast=-- -ub 1024")))
    kw.setdefault("prompts", PROMPTS)
    return plans.plan(model=model, llama_server=Path("/opt/llama/llama-server"), **kw)  # type: ignore[arg-type]


def test_rounds_interleave_the_configs_a_b_a_b(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    p = _plan(model, rounds=3)
    assert [(r.round, r.config.name) for r in p.schedule()] == [(1, "base"), (1, "fast"), (2, "base"), (2, "fast"), (3, "base"), (3, "fast")]
    assert p.baseline.name == "base"
    assert p.metrics == ("prompt", "decode code", "decode prose", "decode short")


def test_each_run_is_the_launcher_with_the_configs_arguments(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    p = _plan(model, device="cuda", context=8192)
    launch = p.launch(p.schedule()[1], 41234)
    assert launch.argv[1:] == (
        *LAUNCHER, "-m", str(model), "--device", "cuda", "--llama-server", "/opt/llama/llama-server",
        "--host", "127.0.0.1", "--port", "41234", "-c", "8192", "--", "-ub", "1024",
    )  # fmt: skip
    assert launch.name == plans.SERVER_NAME.format(config="fast", round=1)
    assert launch.url == "http://127.0.0.1:41234"


def test_the_completion_protocols_bodies_measure_the_whole_prompt_and_exactly_n_decode_tokens(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    p = _plan(model, decode_tokens=64, protocol=protocol.COMPLETION)
    assert (p.path, p.described) == ("/completion", protocol.PROTOCOLS[protocol.COMPLETION])
    assert p.prompt_body([5, 6, 7]) == {"prompt": [5, 6, 7], "n_predict": 1, "temperature": 0, "top_k": 1, "seed": 42, "cache_prompt": False}
    assert p.decode_body(PROMPTS[0]) == {
        "prompt": "def f():", "n_predict": 64, "temperature": 0, "top_k": 1, "seed": 42, "cache_prompt": False, "ignore_eos": True,
    }  # fmt: skip
    # the unmeasured warm-up: the first decode prompt, greedy like the samples, shorter
    assert p.warmup_bodies([5, 6, 7]) == [{**p.decode_body(PROMPTS[0]), "n_predict": 32}]
    assert _plan(model, warmup_tokens=0).warmup_bodies([5]) == []


def test_the_seeds_protocols_bodies_are_the_engines_chat_completions_with_thinking_off(tmp_path: Path) -> None:
    """The engine's tools/bench.py: a non-streamed chat completion, greedy, the prompt cache off, thinking off; the
    prompt's speed from a request of 8 tokens, decode from 256 at most."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    p = plans.plan(model=model, llama_server=Path("/opt/llama/llama-server"), configs=[plans.BenchConfig("base")], protocol=protocol.SEEDS)
    chat = {"temperature": 0, "cache_prompt": False, "chat_template_kwargs": {"enable_thinking": False}}
    assert (p.path, p.described) == ("/v1/chat/completions", protocol.PROTOCOLS[protocol.SEEDS])
    assert p.prompt_body("a long text") == {"messages": [{"role": "user", "content": "a long text"}], "max_tokens": 8, **chat}
    # its decode prompts and prompt length are the seeds' own
    assert p.prompt_tokens == 1838
    assert [(d.name, d.text) for d in p.prompts] == list(protocol.DECODE_PROMPTS.items())
    code = protocol.DECODE_PROMPTS["code"]
    assert p.decode_body(p.prompts[0]) == {"messages": [{"role": "user", "content": code}], "max_tokens": 256, **chat}
    # the warm-ups are the real-shaped set's: a short decode, then the long prompt once
    short = protocol.DECODE_PROMPTS["short"]
    assert p.warmup_bodies("a long text") == [
        {"messages": [{"role": "user", "content": short}], "max_tokens": 32, **chat},
        {"messages": [{"role": "user", "content": "a long text"}], "max_tokens": 1, **chat},
    ]
    # the real-shaped set's requests are these very bodies
    assert protocol.chat_body(short, protocol.WARMUP_MAX_TOKENS) == {"messages": [{"role": "user", "content": short}], "max_tokens": 4, **chat}
    assert protocol.warmups(None) == [(short, protocol.WARMUP_MAX_TOKENS)]
    # the completion protocol keeps its own defaults: the committed prompts, 1,800 tokens
    kept = _plan(model, prompts=None, protocol=protocol.COMPLETION)
    assert (kept.prompt_tokens, kept.prompts) == (plans.DEFAULT_PROMPT_TOKENS, load_prompts())


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"configs": ()}, plans.NO_CONFIG),
        ({"configs": (plans.BenchConfig("a"), plans.BenchConfig("a"))}, plans.CONFIG_TWICE.format(name="a")),
        ({"rounds": 0}, plans.AT_LEAST_ONE.format(flag="--rounds", value=0)),
        ({"decode_tokens": 0}, plans.AT_LEAST_ONE.format(flag="--decode-tokens", value=0)),
        ({"warmup_tokens": -1}, plans.BAD_WARMUP.format(value=-1)),
        ({"prompt_tokens": 4096, "context": 4096}, plans.PROMPT_TOO_LONG.format(tokens=4096, context=4096)),
        # the seeds' prompt request generates 8 tokens after the prompt
        ({"prompt_tokens": 4090, "context": 4096, "protocol": protocol.SEEDS}, plans.PROMPT_TOO_LONG.format(tokens=4090, context=4096)),
        ({"protocol": "chat"}, plans.NO_SUCH_PROTOCOL.format(protocol="chat", known="seeds, completion")),
    ],
)
def test_bad_options_are_refused_before_anything_starts(tmp_path: Path, kw: dict[str, object], message: str) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(ConfigError) as exc:
        _plan(model, **kw)
    assert message in exc.value.message


def test_a_missing_model_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=pattern(model_sets.NO_SUCH_MODEL, option="-m", path=tmp_path / "nope.gguf")):
        _plan(tmp_path / "nope.gguf")


def test_each_config_goes_through_serves_dry_run_first(tiny_models: TinyModels) -> None:
    def check(config: str) -> None:
        bench_plan = plans.plan(model=tiny_models.target, llama_server=Path("/bin/true"), configs=[plans.parse_config("base="), plans.parse_config(config)],
                              device="cpu", prompts=PROMPTS)  # fmt: skip
        plans.check_configs(bench_plan)

    check(f"drafted=-- -md {tiny_models.drafter} --spec-type draft-simple")
    with pytest.raises(ConfigError) as exc:
        check(f"dflash=--dflash {tiny_models.drafter}")
    refused = plans.SERVE_REFUSED.format(name="dflash", line="")  # what comes before serve's own line
    assert exc.value.message.startswith(refused)
    assert "dflash" in exc.value.message.removeprefix(refused)
    with pytest.raises(ConfigError) as exc:
        check("typo=--mtp-maxx 4")
    refused = plans.SERVE_REFUSED.format(name="typo", line="")
    assert exc.value.message.startswith(refused)
    assert "--mtp-maxx" in exc.value.message.removeprefix(refused)


def _sample(config: str, metric: str, tps: float, rep: int = 1, drafted: tuple[int, int] = (0, 0)) -> bench.Sample:
    return bench.Sample(1, config, metric, rep, tokens=100, ms=100_000 / tps, seconds=0.1, draft_n=drafted[0], draft_n_accepted=drafted[1])


def test_figures_are_best_and_median_over_every_sample_and_the_change_is_against_the_baselines_median(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    p = _plan(model, prompts=PROMPTS[:1])
    samples = [
        _sample("base", "prompt", 100), _sample("base", "prompt", 90), _sample("base", "prompt", 120),
        _sample("fast", "prompt", 110), _sample("fast", "prompt", 80), _sample("fast", "prompt", 99),
        _sample("base", "decode code", 10), _sample("fast", "decode code", 30, drafted=(40, 30)), _sample("fast", "decode code", 32, drafted=(40, 10)),
    ]  # fmt: skip
    figures = {(f.config, f.metric): f for f in bench.summarise(p, samples)}
    base, fast = figures[("base", "prompt")], figures[("fast", "prompt")]
    assert base.best == pytest.approx(120)
    assert base.median == pytest.approx(100)
    assert (base.samples, base.change_pct) == (3, None)
    assert fast.best == pytest.approx(110)
    assert fast.median == pytest.approx(99)
    assert fast.change_pct == pytest.approx(-1.0)
    decode = figures[("fast", "decode code")]
    assert decode.median == pytest.approx(31)
    assert decode.change_pct == pytest.approx(210.0)
    assert decode.acceptance == pytest.approx(0.5)
    assert figures[("base", "decode code")].acceptance is None
    # the spread: the interquartile range, and a bootstrap 95% interval of the median (the same samples, the same interval)
    assert base.to_json()["iqr"] == [95.0, 110.0]
    assert base.to_json()["median_95"] == [90.0, 120.0]
    base_prompt = bench.CELL.format(best=120, median=100) + bench.CELL_INTERVAL.format(low=90, high=120)
    base_decode = bench.CELL.format(best=10, median=10) + bench.CELL_INTERVAL.format(low=10, high=10)
    fast_prompt = bench.CELL.format(best=110, median=99) + bench.CELL_INTERVAL.format(low=80, high=110) + bench.CELL_CHANGE.format(change=-1.0)
    fast_decode = bench.CELL.format(best=32, median=31) + bench.CELL_INTERVAL.format(low=30, high=32) + bench.CELL_CHANGE.format(change=210.0)
    assert bench.table(p, list(figures.values())) == (  # each column as wide as its widest cell, two spaces apart
        bench.PROTOCOL_LINE.format(protocol="completion", requests=protocol.PROTOCOLS["completion"]) + "\n"
        f"{bench.CONFIG_COLUMN:8}{'prompt':35}decode code\n"
        f"{'base':8}{base_prompt:35}{base_decode}\n"
        f"{'fast':8}{fast_prompt:35}{fast_decode}"
    )


def test_a_sample_comes_from_the_servers_own_timings() -> None:
    r = plans.Run(2, plans.BenchConfig("base"))
    s = bench.sample_from({"timings": {"prompt_n": 1800, "prompt_ms": 900.0, "predicted_n": 1, "predicted_ms": 5.0}}, r, "prompt", 3, 0.95, "base")
    assert (s.round, s.config, s.metric, s.rep, s.tokens) == (2, "base", "prompt", 3, 1800)
    assert s.tps == pytest.approx(2000.0)
    d = bench.sample_from({"timings": {"prompt_n": 9, "prompt_ms": 1.0, "predicted_n": 256, "predicted_ms": 512.0, "draft_n": 80, "draft_n_accepted": 60}},
                          r, "decode code", 1, 0.6, "base")  # fmt: skip
    assert (d.tokens, d.draft_n, d.draft_n_accepted) == (256, 80, 60)
    assert d.tps == pytest.approx(500.0)
    with pytest.raises(ServerFailed, match=pattern(bench.NO_TIMINGS, server="base")):
        bench.sample_from({}, r, "prompt", 1, 0.1, "base")
    with pytest.raises(ServerFailed, match=pattern(bench.TIMINGS_LACK, server="base", phase="predicted")):
        bench.sample_from({"timings": {"prompt_n": 9, "prompt_ms": 1.0}}, r, "decode code", 1, 0.1, "base")


def test_a_second_holder_of_the_lock_waits_and_says_who_holds_it(tmp_path: Path) -> None:
    lock = tmp_path / "box.lock"
    said: list[str] = []
    order: list[str] = []
    with bench.box_lock(lock, said.append):
        assert pattern(locks.HOLDER, pid=os.getpid()).match(lock.read_text())

        def second() -> None:
            with bench.box_lock(lock, said.append):
                order.append("second")

        t = threading.Thread(target=second)
        t.start()
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            time.sleep(0.01)
        order.append("first done")
    t.join(10)
    assert order == ["first done", "second"]
    assert pattern(partly(locks.WAITING, who="bench", path=lock, holder=locks.HOLDER)).match(said[0])
    assert pattern(locks.GOT_IT, who="bench", path=lock).match(said[1])
    assert lock.read_text() == ""


def test_no_lock_path_holds_nothing(tmp_path: Path) -> None:
    said: list[str] = []
    with bench.box_lock(None, said.append), bench.box_lock(None, said.append):
        pass
    assert said == []


@pytest.mark.parametrize("name", [protocol.SEEDS, protocol.COMPLETION])
def test_the_record_and_the_report_name_the_protocol_that_made_every_figure(tmp_path: Path, name: str) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    p = _plan(model, prompts=PROMPTS[:1], protocol=name)
    samples = (_sample("base", "prompt", 100), _sample("fast", "prompt", 90), _sample("base", "decode code", 10), _sample("fast", "decode code", 9))
    result = bench.BenchResult(p, samples, (), "2026-12-06T00:00:00.000+00:00", "2026-12-06T00:00:01.000+00:00", 1.0, prompt_tokens=p.prompt_tokens)
    out = io.StringIO()
    figures = bench.print_report(result, out)
    record = bench.to_json(result, figures)
    assert (record["protocol"], record["protocol_requests"]) == (name, protocol.PROTOCOLS[name])
    assert record["prompt_tokens"] == record["prompt_tokens_made"] == (1838 if name == protocol.SEEDS else 1800)
    caption = bench.PROTOCOL_LINE.format(protocol=name, requests=protocol.PROTOCOLS[name])
    printed = out.getvalue().splitlines()
    assert printed[1] == caption  # the table's own first line, above its header
    assert printed[2].split()[0] == bench.CONFIG_COLUMN
    assert f"the {name} protocol" in printed[0]


def test_the_prompt_made_says_its_count_and_whether_it_is_the_nearest() -> None:
    exact = bench.LongPrompt("text", 1838, 1838)
    assert bench.made_line(exact, protocol.SEEDS) == bench.PROMPT_MADE.format(tokens=1838, counted=bench.WITH_TEMPLATE)
    assert bench.made_line(bench.LongPrompt((1, 2), 2, 2), protocol.COMPLETION) == bench.PROMPT_MADE.format(tokens=2, counted="")
    near = bench.made_line(bench.LongPrompt("text", 1839, 1838), protocol.SEEDS)
    assert near == bench.PROMPT_NEAREST.format(made=bench.PROMPT_MADE.format(tokens=1839, counted=bench.WITH_TEMPLATE), asked=1838)


class StandInTokenizer:
    """A stand-in for a llama-server's /apply-template, /tokenize and /detokenize, where a trained tokenizer's merges
    would be (the real server holds chat_prompt in the slow tier, on a vocabulary where every count is met at once):
    "[" and "]" wrap the message, a token each, and each "x" is one. ``merge``: "x]" is one token, as a BPE merge
    across the cut; ``odd``: a run of an odd count of x's costs one token more, so no odd total can be made."""

    X, EXTRA = 7, 8

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.rendered = 0

    def __call__(self, path: str, body: Mapping[str, Any]) -> dict[str, object]:
        if path == "/apply-template":
            messages = body["messages"]
            assert isinstance(messages, list)
            assert body["chat_template_kwargs"] == {"enable_thinking": False}
            self.rendered += 1
            return {"prompt": "[" + messages[0]["content"] + "]"}
        if path == "/tokenize":
            text = str(body["content"])
            ids = [1 if c == "[" else 2 if c == "]" else self.X for c in text.replace("x]", "]" if self.mode == "merge" else "x]")]
            if self.mode == "odd" and text.count("x") % 2:
                ids.append(self.EXTRA)
            return {"tokens": ids}
        tokens = body["tokens"]
        assert isinstance(tokens, list)
        return {"content": "x" * tokens.count(self.X)}


def test_a_chat_prompt_of_n_tokens_moves_its_cut_until_the_whole_templated_prompt_counts_n_stand_in_tokenizer() -> None:
    plain = protocol.chat_prompt(StandInTokenizer("plain"), 12, "xx", "base")
    assert (plain.content, plain.tokens, plain.exact) == ("x" * 10, 12, True)
    # the last x merges with the template's "]": 10 x's make 11, so the cut moves by one and 11 x's make 12
    merging = StandInTokenizer("merge")
    made = protocol.chat_prompt(merging, 12, "xx", "base")
    assert (made.content, made.tokens, made.exact) == ("x" * 11, 12, True)
    assert merging.rendered == 3  # the empty message, then two tries
    # 11 cannot be made (9 x's are 12 tokens, 8 are 10): the nearest after TRIES tries, and it says its own count
    odd = StandInTokenizer("odd")
    made = protocol.chat_prompt(odd, 11, "xx", "base")
    assert (made.tokens, made.asked, made.exact) == (12, 11, False)
    assert odd.rendered == 1 + protocol.TRIES
    with pytest.raises(ConfigError, match=pattern(protocol.TOO_SHORT, tokens=2, overhead=2)):
        protocol.chat_prompt(StandInTokenizer("plain"), 2, "xx", "base")
