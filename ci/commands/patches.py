"""``nox -s patches``: bring the checkout to the pin + series (fetching first); ``--check`` only says what would
apply, ``--reset`` discards hand edits."""

from __future__ import annotations

import argparse

from ci.commands import job_of, say
from ci.source import sync


def main(args: argparse.Namespace) -> int:
    source = job_of(args).source()
    if args.check:
        return sync.check(source, args.remote, say)
    say(sync.sync(source, remote=args.remote, reset=args.reset).describe())
    return 0
