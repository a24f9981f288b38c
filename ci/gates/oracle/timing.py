"""The oracle's kernel times: the op's time per case on the device (``--bench-mode``: every compute after a warm-up),
and each timed case compared with the last release's as the perf gate judges its checks: the ratio of the medians,
a bootstrap 95% interval over both runs' samples, against 1 + the profile's tolerance (pins.yaml expect.oracle).
Wholly under passes, wholly over fails; a straddle is measured again once, then inconclusive, never a pass. The
release's samples are its oracle record's metrics (``time.CASE.sK``), so no absolute time is a verdict.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ci.gates.oracle import NAME
from ci.gates.results import CaseResult, Status

TIMED = ("gdn-engine-k8", "gdn-decode-k1", "gdn-long-t2048")  # the engine's prefill, its decode, a long sequence
SAMPLES = 9  # timed computes per case, after the driver's warm-up
BOOTSTRAP = 2000
CLASSNAME = f"{NAME}.time"

# Messages, shared with the tests that match on them (tests/support/messages.py)
TIME_NAME = "{case} time"
MEASURED = "{case}: {median:.3f} ms, median of {n}"
AGAINST = "; {ratio:.3f}x the release at {pin} (95% interval {low:.3f}-{high:.3f}) against the ceiling {ceiling:.2f}"
HOLDS = ": holds"
SLOWER = ": slower"
INCONCLUSIVE = ": inconclusive: the interval straddles the ceiling"
NO_RELEASE = "; no release to compare with"
RELEASE_UNTIMED = "; the release at {pin} has no time for it"
NO_SAMPLES = "{case}: no time: the driver printed no sample"


@dataclass(frozen=True)
class Ratio:
    ratio: float
    low: float
    high: float


def ratio(now: Sequence[float], before: Sequence[float], seed: int = 0) -> Ratio:
    """The median of ``now`` over the median of ``before``, with a bootstrap 95% interval resampling both (seeded:
    the same samples give the same interval)."""
    rng = random.Random(seed)
    draws = sorted(statistics.median(rng.choices(now, k=len(now))) / statistics.median(rng.choices(before, k=len(before))) for _ in range(BOOTSTRAP))
    return Ratio(statistics.median(now) / statistics.median(before), draws[int(0.025 * BOOTSTRAP)], draws[int(0.975 * BOOTSTRAP) - 1])


def samples_of(metrics: Mapping[str, float], case: str) -> tuple[float, ...]:
    """A record's samples of ``case``, in order (its metrics ``time.CASE.s1`` ...)."""
    prefix = f"time.{case}.s"
    found = sorted((int(k[len(prefix) :]), float(v)) for k, v in metrics.items() if k.startswith(prefix) and k[len(prefix) :].isdigit())
    return tuple(v for _, v in found)


def metrics_of(case: str, samples: Sequence[float]) -> tuple[tuple[str, float], ...]:
    """What a record keeps of a timed case: its median and every sample (what the next bump compares with)."""
    return ((f"time.{case}.median", round(statistics.median(samples), 6)), *((f"time.{case}.s{k}", round(v, 6)) for k, v in enumerate(samples, 1)))


def judge_time(case: str, samples: Sequence[float], released: tuple[str, Mapping[str, float]] | None, tolerance: float) -> CaseResult:
    """One timed case: measured, and against the release's samples of it when there are any."""
    name = TIME_NAME.format(case=case)
    if not samples:
        return CaseResult(name, Status.ERROR, NO_SAMPLES.format(case=case), classname=CLASSNAME)
    message = MEASURED.format(case=case, median=statistics.median(samples), n=len(samples))
    if released is None:
        return CaseResult(name, Status.PASSED, message + NO_RELEASE, classname=CLASSNAME)
    pin, metrics = released
    before = samples_of(metrics, case)
    if not before:
        return CaseResult(name, Status.PASSED, message + RELEASE_UNTIMED.format(pin=pin[:7]), classname=CLASSNAME)
    r = ratio(samples, before)
    ceiling = 1.0 + tolerance
    message += AGAINST.format(ratio=r.ratio, pin=pin[:7], low=r.low, high=r.high, ceiling=ceiling)
    if r.high <= ceiling:
        return CaseResult(name, Status.PASSED, message + HOLDS, classname=CLASSNAME)
    if r.low > ceiling:
        return CaseResult(name, Status.FAILED, message + SLOWER, classname=CLASSNAME)
    return CaseResult(name, Status.FAILED, message + INCONCLUSIVE, classname=CLASSNAME, inconclusive=True)
