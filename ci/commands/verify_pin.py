"""``nox -s verify_pin``: pins.yaml, .gitmodules, the gitlink and the checkout agree; every disagreement at once."""

from __future__ import annotations

import argparse
from pathlib import Path

from ci.commands import say
from ci.pin.project import find_project
from ci.pin.verify import verify


def main(args: argparse.Namespace) -> int:
    check = verify(find_project(Path(args.root) if args.root else None))  # reads pins.yaml itself: its problems are listed with the rest
    if not check.ok:
        raise check.error()
    say(check.headline())
    return 0
