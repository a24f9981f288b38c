"""The perf gate's judgement, pure: checks parsed, a value per round, a bootstrap interval, the three verdicts and a
regression against the last release."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ci.errors import ConfigError
from ci.gates.perf import judge as perf
from ci.gates.results import GateResult, Status
from ci.gates.serving import bench
from ci.pin import claims
from tests.support.messages import pattern, said


def sample(r: int, config: str, metric: str, tps: float, tokens: int, draft_n: int = 0, draft_n_accepted: int = 0, draft_max: int = 0) -> bench.Sample:
    """A bench sample of ``tokens`` at ``tps`` (the server's own timing), as the bench records it."""
    return bench.Sample(r, config, metric, 1, tokens, 1000.0 * tokens / tps, 1.0, draft_n, draft_n_accepted, draft_max)


def samples(base_decode: list[float], draft_decode: list[float], steps: tuple[int, int] = (256, 55)) -> list[bench.Sample]:
    out = []
    for r, (b, d) in enumerate(zip(base_decode, draft_decode, strict=True), 1):
        out.append(sample(r, "base", "decode code", b, 256))
        out.append(sample(r, "draft", "decode code", d, steps[0], draft_n=300, draft_n_accepted=steps[1]))
    return out


def judge(checks: list[claims.Check], s: list[bench.Sample], released: perf.Released | None, pin: str, models: str, seconds: float) -> GateResult:
    return perf.result(perf.judge_all(checks, s, released, pin), released, pin, models, seconds)


WHERE = "pins.yaml: expect.perf.tiny[0]"  # where the tests' checks say they are


def check(text: str, tolerance: float = 0.1) -> claims.Check:
    return claims.parse_check(text, "a measurement", tolerance, WHERE)


def test_a_ratio_above_its_floor_passes_with_its_interval() -> None:
    c = check("decode(draft, code) / decode(base, code) >= 2.5")
    result = judge([c], samples([100, 102, 98, 101, 99], [300, 310, 295, 305, 290]), None, "a" * 40, "release models", 1.0)
    assert result.status is Status.PASSED
    (case,) = result.cases
    assert pattern(perf.FIGURE + perf.PASSES, check="decode(draft, code) / decode(base, code)", median=3.010, rounds=5, floor=2.5).fullmatch(case.message)
    m = dict(result.metrics)
    assert m["decode(draft, code) / decode(base, code).round1"] == 3.0  # every sample kept


def test_below_fails_and_straddling_is_inconclusive() -> None:
    c = check("decode(draft, code) / decode(base, code) >= 2.5")
    low = judge([c], samples([100] * 5, [200, 210, 190, 205, 195]), None, "a" * 40, "x", 1.0)
    assert low.status is Status.FAILED
    assert low.cases[0].message.endswith(perf.FAILS)
    noisy = judge([c], samples([100] * 5, [200, 300, 240, 260, 280]), None, "a" * 40, "x", 1.0)
    assert noisy.status is Status.FAILED
    assert noisy.cases[0].message.endswith(perf.IS_INCONCLUSIVE)
    assert noisy.summary.endswith(perf.SUMMARY_INCONCLUSIVE.format(count=1))


def test_tokens_per_step_and_a_regression_against_the_last_release() -> None:
    c = check("tokens_per_step(draft, code) >= 4.0")
    now = samples([100] * 5, [300] * 5, steps=(256, 209))  # 256 / 47 steps = 5.45
    released = perf.Released("b" * 40, {"tokens_per_step(draft, code)": 6.7})
    result = judge([c], now, released, "c" * 40, "release models", 1.0)
    assert result.status is Status.FAILED
    msg = result.cases[0].message
    assert said(perf.FIGURE, msg, check="tokens_per_step(draft, code)", median=5.447)
    assert perf.REGRESSION.format(median=5.447, pin="ccccccc", before=6.7, released="bbbbbbb", change=-18.7, tolerance=10) in msg
    assert judge([c], now, perf.Released("b" * 40, {"tokens_per_step(draft, code)": 5.5}), "c" * 40, "x", 1.0).ok


@pytest.mark.parametrize(
    ("text", "message", "known"),
    [
        ("decode(draft) > 2", claims.NOT_A_CHECK, {"text": "decode(draft) > 2"}),
        ("speed(draft) >= 2", claims.NOT_A_METRIC, {"metric": "speed", "metrics": ", ".join(claims.METRICS)}),
        ("decode(dflash) >= 2", claims.NOT_A_CONFIG, {"config": "dflash", "configs": ", ".join(claims.CONFIGS)}),
    ],
)
def test_a_bad_check_is_one_line_naming_it(text: str, message: str, known: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=re.escape(message.format(where=WHERE, **known))):
        check(text)


def test_the_interval_is_the_same_for_the_same_samples() -> None:
    values = [1.0, 1.2, 0.9, 1.1, 1.05, 0.95]
    assert bench.spread(values) == bench.spread(values)
    s = bench.spread(values)
    assert s.low <= s.median <= s.high
    assert s.q1 <= s.median <= s.q3


def test_pins_yaml_checks_are_parsed_when_the_job_resolves_naming_the_key() -> None:
    """A bad check stops every command as its job resolves (registry.check_expect), not the perf gate after the other gates ran."""
    from pathlib import Path

    from ci.pin import pins
    from tests.support.project import pins_text

    good = '  perf:\n    tiny:\n      - check: "tokens_per_step(draft, code) >= 3.5"\n        measured: "a run"\n'
    from ci.gates import registry
    from ci.gates.perf import spec

    loaded = pins.parse(pins_text("a" * 40, extra=good), Path("pins.yaml"))
    (parsed,) = spec.expectations(loaded).checks("tiny")
    assert (parsed.name, parsed.floor, parsed.measured, parsed.tolerance) == ("tokens_per_step(draft, code)", 3.5, "a run", 0.1)
    with pytest.raises(ConfigError) as exc:
        registry.check_expect(pins.parse(pins_text("a" * 40, extra=good.replace("tokens_per_step", "speed")), Path("pins.yaml")))
    where = spec.CHECK_WHERE.format(file="pins.yaml", key="expect.perf.tiny[0].check")
    assert exc.value.message == claims.NOT_A_METRIC.format(where=where, metric="speed", metrics=", ".join(claims.METRICS))


def test_tokens_per_step_at_full_acceptance_is_bounded_by_the_draft_length() -> None:
    """One formula (ci.gates.serving.drafting) for the equivalence gate, the perf gate and the bench: at full acceptance the
    steps are at least the drafted tokens over the draft length (an earlier formula here gave 256 tokens/step)."""
    from ci.gates.equivalence.judge import Timings

    c = check("tokens_per_step(draft, code) >= 1.0")
    full = [sample(r, "draft", "decode code", 300.0, 256, draft_n=256, draft_n_accepted=256, draft_max=8) for r in (1, 2, 3)]
    assert perf.value(c.top, full, 1) == 8.0
    assert Timings(predicted_n=256, draft_n=256, draft_n_accepted=256, draft_max=8).tokens_per_step == 8.0


def test_the_chart_shows_each_judged_check_with_its_floor_and_title(tmp_path: Path) -> None:
    c = check("decode(draft, code) / decode(base, code) >= 2.5")
    judged = perf.judge_all([c], samples([100, 102, 98, 101, 99], [300, 310, 295, 305, 290]), None, "a" * 40)
    drawn = perf.chart(judged, tmp_path / "perf.svg", "perf: cpu, pin aaaaaaa, tiny generated models only (5 rounds)")
    assert drawn == tmp_path / "perf.svg"
    svg = drawn.read_text()
    for text in ("perf: cpu, pin aaaaaaa", perf.FLOOR_LABEL.format(floor=2.5), "decode(draft, code) / decode(base, code)", "passed"):
        assert text in svg
