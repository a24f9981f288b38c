"""``nox -s ship``: the table of every gate ship requires for this build (the key computed from what is here now,
not read from the manifest); the launcher's wheel and sdist when all passed."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ci.commands import given, job_of, say
from ci.commands.job import Job, current
from ci.compile.stage import CurrentBuild
from ci.errors import Refused
from ci.files import shown
from ci.pin.verify import verify
from ci.release import ledger, records, ship

# Messages, shared with the tests that match on them (tests/support/messages.py)
SUMMARY_TITLE = "### ship, profile {profile}: {verdict}"
EVERY_GATE_PASSED = "every gate passed"  # SUMMARY_TITLE's verdict
REFUSED = "REFUSED"
WROTE = "ship: wrote {path}"
PIN_UNVERIFIED = "ship: the pin does not verify: {problems}; run nox -s verify_pin"  # release.json names the pin


def session(job: Job, build: CurrentBuild, dist: Path | None, check_only: bool, say: Callable[[str], None], *, verified: bool = False) -> int:
    """The table; the distribution when every gate passed. The pin is verified first (unless the caller just did, as
    the main job does): release.json names its url and branch, which the build key does not hold."""
    if not verified:
        pin = verify(job.project, job.pins, checkout_head=False)
        if not pin.ok:
            raise Refused(PIN_UNVERIFIED.format(problems="; ".join(pin.problems)))
    results_dir = ledger.default_results_dir(job.root)
    # the ledger held from the read to the release's record: a gate's record appended meanwhile lands after it
    with ledger.hold(ledger.ledger_path(results_dir)):
        return _decide(job, build, results_dir, dist, check_only, say)


def _decide(job: Job, build: CurrentBuild, results_dir: Path, dist: Path | None, check_only: bool, say: Callable[[str], None]) -> int:
    result = ship.check(build, job.pins, results_dir, job.root)
    standing = ship.table(result)
    say(standing)
    title = SUMMARY_TITLE.format(profile=build.manifest.profile, verdict=EVERY_GATE_PASSED if result.ok else REFUSED)
    records.step_summary(f"{title}\n\n```\n{standing}\n```\n")
    if not result.ok:
        raise ship.refusal(result)
    if check_only:
        say("ship: every gate passed for this build")
        return 0
    for f in ship.ship(job.pins, job.root, result, results_dir, dist or job.root / "dist"):
        say(WROTE.format(path=shown(f, job.root)))
    return 0


def main(args: argparse.Namespace) -> int:
    job = job_of(args)
    return session(job, current(job, args.profile), given(args.dist), args.check, say)
