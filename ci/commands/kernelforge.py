"""``nox -s kernelforge -- --out DIR``: the seed's KernelForge task for the delta-net kernel, written from the pin
(the checkout at pin + series) and the profile's current build (ci/gates/oracle/kernelforge.py; docs/kernelforge.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ci.commands import a_folder, job_of, say
from ci.commands.job import current
from ci.gates.oracle import kernelforge


def main(args: argparse.Namespace) -> int:
    job = job_of(args)
    out = Path(args.out)
    a_folder(out.parent, "--out", "the task")
    build = current(job, args.profile)
    m = build.manifest
    expectation = None
    from ci.gates.oracle.gate import GATE

    if GATE.declared(job.pins):
        expectation = GATE.expectation(job.pins, m.profile)
    floor = min(expectation.output_db, expectation.slots_db) if expectation is not None else 100.0
    task = kernelforge.plan(out, job.root / job.pins.submodule, build.build_dir, m.device, m.pin_commit, job.pins.fork.reference, m.series_digest, floor)
    kernelforge.write(task)
    say(kernelforge.WROTE.format(out=out, files=len(task.files), pin=m.pin_commit[:7], series=m.series_digest[:12]))
    return 0
