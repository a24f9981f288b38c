"""The oracle's kernel times against the last release's: a ratio of medians with an interval over both runs' samples,
judged against 1 + the tolerance as the perf gate judges its floors."""

from __future__ import annotations

from ci.gates.oracle import timing
from ci.gates.results import Status


def test_a_record_keeps_every_sample_and_gives_them_back_in_order() -> None:
    metrics = dict(timing.metrics_of("gdn-engine-k8", [3.0, 1.0, 2.0]))
    assert metrics["time.gdn-engine-k8.median"] == 2.0
    assert timing.samples_of(metrics, "gdn-engine-k8") == (3.0, 1.0, 2.0)
    assert timing.samples_of(metrics, "gdn-decode-k1") == ()


def test_the_same_time_holds_a_slowdown_fails_and_a_straddle_is_inconclusive() -> None:
    before = ("b" * 40, dict(timing.metrics_of("c", [10.0, 10.2, 9.9, 10.1, 10.0, 9.8, 10.3, 10.0, 10.1])))
    same = timing.judge_time("c", [10.1, 9.9, 10.0, 10.2, 9.8, 10.0, 10.1, 10.0, 9.9], before, 0.25)
    assert same.status is Status.PASSED
    assert same.message.endswith(timing.HOLDS)
    slower = timing.judge_time("c", [15.0, 15.2, 14.9, 15.1, 15.0, 14.8, 15.3, 15.0, 15.1], before, 0.25)
    assert slower.status is Status.FAILED
    assert not slower.inconclusive
    assert slower.message.endswith(timing.SLOWER)
    noisy = timing.judge_time("c", [9.0, 14.0, 12.5, 11.0, 15.5, 12.0, 13.5, 10.0, 12.6], before, 0.25)
    assert noisy.status is Status.FAILED
    assert noisy.inconclusive  # never a pass: the gate measures again, once, before it stands


def test_with_no_release_the_time_is_recorded_and_judged_against_nothing() -> None:
    alone = timing.judge_time("c", [1.0, 2.0, 3.0], None, 0.25)
    assert alone.status is Status.PASSED
    assert alone.message == timing.MEASURED.format(case="c", median=2.0, n=3) + timing.NO_RELEASE
    assert timing.judge_time("c", [], None, 0.25).status is Status.ERROR
