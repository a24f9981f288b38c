"""What the next build is compared with is the release's own figures: the records that counted when it shipped (the
ship record names their lines), not a later run of the released build. A hostile pass (2026-12-05): after a perf pass
at 100 and the ship, a 1-round perf failure at 10 on the same build became the baseline of every later bump."""

from __future__ import annotations

from pathlib import Path

from ci.gates.perf import judge as perf
from ci.gates.results import GateResult, Status
from ci.release import ledger
from ci.release import standings as release_standings

KEY = "k" * 64


def perf_record(median: float, status: Status = Status.PASSED) -> GateResult:
    return GateResult("perf", status, status.value, properties=(("models", "tiny generated models only"),), metrics=(("decode.median", median),))


def test_the_baseline_is_the_record_that_counted_when_the_release_shipped(tmp_path: Path) -> None:
    book = tmp_path / "ledger.jsonl"
    ctx = ledger.BuildContext(KEY, "p" * 40, "s" * 64, "cpu", "CPU")
    counted = ledger.append(book, perf_record(100.0), ctx)
    shipped = GateResult(release_standings.SHIP, Status.PASSED, "shipped", properties=(("release", "r"), (release_standings.COUNTED.format(gate="perf"), str(counted.line))))
    ledger.append(book, shipped, ctx)
    ledger.append(book, perf_record(10.0, Status.FAILED), ctx)  # a later run of the released build, one round
    read = ledger.read(book, None)
    released = perf.released_figures(release_standings.released_record(read, "cpu", "n" * 64, "perf"), "tiny generated models only")
    assert released is not None
    assert released.medians == {"decode": 100.0}
    assert perf.Released is type(released)
