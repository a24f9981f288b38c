"""The real-shaped set's checks (issue 42): what pins.yaml may declare for it, how its legs are grouped onto live
servers, and how a round's samples become the values the sequential test judges (the 16K first token, decode's share
of the device's memory bandwidth)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ci.errors import ConfigError
from ci.gates.perf import judge as perf
from ci.gates.perf import real_shape, spec
from ci.gates.results import Status
from ci.gates.serving import devices, protocol
from ci.gates.serving.bench import Sample
from ci.pin.claims import Check, parse_check
from ci.schema import Section, parse_yaml


def check(text: str) -> Check:
    return parse_check(text, "a run", 0.1, "pins.yaml: expect.perf.real-shape.cuda[0]", real_shape.CONFIGS)


def section(text: str) -> Section:
    return Section("pins.yaml", "expect.perf", parse_yaml(text, "pins.yaml"))


SEEDS = """
tiny:
  - {check: "prompt(draft) / prompt(base) >= 0.2", measured: "a run"}
real-shape:
  cuda:
    - {check: "prompt(dflash) / prompt(base) >= 0.9", measured: "a run"}
    - {check: "prompt(base) / prompt(ub1024) >= 1.0", measured: "a run"}
    - {check: "prompt(moe_ub1024) / prompt(moe) >= 1.0", measured: "a run"}
    - {check: "prompt(base, long) / prompt(fa_off, long) >= 1.0", measured: "a run"}
    - {check: "ttft(fa_off, long) / ttft(long, long) >= 1.0", measured: "a run"}
    - {check: "bandwidth(base) >= 0.5", measured: "a run"}
"""


def test_the_seeds_claims_read_per_profile_beside_the_other_sets() -> None:
    read = spec.read(section(SEEDS))
    assert [c.name for c in read.checks("tiny")] == ["prompt(draft) / prompt(base)"]
    assert [c.top.config for c in read.real_shape("cuda")] == ["dflash", "base", "moe_ub1024", "base", "fa_off", "base"]
    assert read.real_shape("vulkan") == ()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("acceptance(dflash) >= 0.3", real_shape.TRAINED_ONLY.format(metric="acceptance", why=real_shape.WHY_DRAFTING)),
        ("tokens_per_step(dflash, code) >= 3", real_shape.TRAINED_ONLY.format(metric="tokens_per_step", why=real_shape.WHY_DRAFTING)),
        ("decode(dflash) / decode(base) >= 1", real_shape.TRAINED_ONLY.format(metric="decode(dflash)", why=real_shape.WHY_DRAFTED_DECODE)),
        ("prompt(moe) / prompt(base) >= 1", real_shape.TWO_MODELS.format(check="prompt(moe) / prompt(base)", top="moe", bottom="base", a="moe", b="target")),
    ],
)
def test_a_check_a_generated_model_cannot_make_honestly_is_refused_with_the_reason(text: str, why: str) -> None:
    doc = f'real-shape:\n  cuda:\n    - {{check: "{text}", measured: "a run"}}\n'
    with pytest.raises(ConfigError) as exc:
        spec.read(section(doc))
    where = spec.CHECK_WHERE.format(file="pins.yaml", key="expect.perf.real-shape.cuda[0].check")
    assert exc.value.message == spec.REFUSED.format(where=where, why=why)


def test_a_config_the_set_has_not_is_named() -> None:
    with pytest.raises(ConfigError, match="not a config"):
        spec.read(section('real-shape:\n  cuda:\n    - {check: "prompt(draft) >= 1", measured: "a run"}\n'))


def test_real_shape_is_per_profile() -> None:
    with pytest.raises(ConfigError) as exc:
        spec.read(section('real-shape:\n  - {check: "prompt(base) >= 1", measured: "a run"}\n'))
    assert spec.NOT_PER_PROFILE in exc.value.message


def test_legs_are_grouped_by_model_three_at_most_with_each_checks_legs_together() -> None:
    checks = spec.read(section(SEEDS)).real_shape("cuda")
    found = real_shape.groups(checks)
    assert [g.legs for g in found] == [("dflash", "base", "ub1024"), ("moe_ub1024", "moe"), ("base", "fa_off", "long")]
    first, moe, long = found
    assert moe.asks == {"moe_ub1024": ("prompt",), "moe": ("prompt",)}
    assert first.asks["base"] == ("prompt", "decode code", "decode prose", "decode short")  # bandwidth reads decode
    assert first.asks["dflash"] == ("prompt",)
    assert long.asks == {"base": ("prompt long",), "fa_off": ("prompt long",), "long": ("prompt long",)}
    for g in found:
        for c in g.checks:
            assert {t.config for t in (c.top, c.bottom) if t is not None} <= set(g.legs)
    assert real_shape.roles_of(checks) == ("drafter", "moe", "target")


def sample(round_: int, config: str, metric: str, tokens: int, ms: float, seconds: float = 1.0, per_tps: float = 0.0) -> Sample:
    return Sample(round_, config, metric, 1, tokens, ms, seconds, bandwidth_per_tps=per_tps)


def test_the_first_token_is_the_requests_own_wall_time_and_bandwidth_a_share_of_the_peak() -> None:
    rounds = [
        sample(1, "fa_off", "prompt long", 16384, 5000.0, seconds=14.0),
        sample(1, "long", "prompt long", 16384, 4600.0, seconds=13.0),
        sample(1, "base", "decode code", 256, 2000.0, per_tps=0.004),
        sample(1, "base", "decode prose", 256, 2560.0, per_tps=0.004),
    ]
    ttft = check("ttft(fa_off, long) / ttft(long, long) >= 1.0")
    assert perf.per_round(ttft, rounds) == [pytest.approx(14.0 / 13.0)]
    bandwidth = check("bandwidth(base) >= 0.3")
    # 128 and 100 t/s, each token reading 0.4% of the peak a second: shares 0.512 and 0.4, their median 0.456
    assert perf.per_round(bandwidth, rounds) == [pytest.approx(0.456)]


def test_decode_without_a_known_peak_is_not_a_number_never_a_pass() -> None:
    rounds = [sample(1, "base", "decode code", 256, 2000.0)]
    (value,) = perf.per_round(check("bandwidth(base) >= 0.3"), rounds)
    assert math.isnan(value)
    assert perf.judge_look(check("bandwidth(base) >= 0.3"), [value] * 6, None, "a" * 40, 0.95).status is Status.FAILED


def test_a_bandwidth_check_on_a_device_of_no_known_peak_is_refused_before_anything_runs() -> None:
    with pytest.raises(ConfigError) as exc:
        real_shape.peak_or_refuse("CPU", devices.peak_bandwidth("CPU"), [check("bandwidth(base) >= 0.3")])
    assert exc.value.message == real_shape.NO_PEAK.format(device="CPU")
    assert real_shape.peak_or_refuse("CPU", None, [check("prompt(dflash) / prompt(base) >= 0.9")]) == 0.0


@pytest.mark.parametrize(
    ("listing", "peak"),
    [("CUDA0: NVIDIA H100 80GB HBM3", 3.35e12), ("CUDA0: NVIDIA H200", 4.8e12), ("Vulkan0: AMD Radeon 8060S Graphics (RADV GFX1151)", 256e9), ("CPU", None)],
)
def test_the_peak_bandwidth_of_the_devices_the_project_runs_on(listing: str, peak: float | None) -> None:
    assert devices.peak_bandwidth(listing) == peak


def test_a_request_of_the_seeds_protocol() -> None:
    body = protocol.chat_body("hello", 8)
    assert body == {
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 8,
        "temperature": 0,
        "cache_prompt": False,
        "chat_template_kwargs": {"enable_thinking": False},
    }


def test_the_dflash_leg_serves_the_sets_drafter() -> None:
    drafter = Path("set/drafter.gguf")
    assert real_shape.LEGS["dflash"].config(drafter).serve_options == ("--dflash", str(drafter))
    assert real_shape.LEGS["long"].config(drafter).serve_options == ("--long-model",)
