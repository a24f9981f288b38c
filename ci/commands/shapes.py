"""``python -m ci shape-models``: write a real-shaped model set (:mod:`ci.gates.shapes`) where the gates will find it,
or into ``--out``, and say what each file is: its size and the weight bytes a decoded token reads."""

from __future__ import annotations

import argparse
from pathlib import Path

from ci.commands import say


def main(args: argparse.Namespace) -> int:
    from ci.gates.shapes import models

    roles = tuple(r for r in (args.roles or ",".join(models.ROLES)).split(",") if r)
    written = models.write_set(args.set, Path(args.out) if args.out else None, roles=roles, jobs=args.jobs, say=say)
    say(written.describe())
    return 0
