"""``nox -s export_patches``: write patches/ back from a local branch of the checkout."""

from __future__ import annotations

import argparse

from ci.commands import job_of, say
from ci.source import export
from ci.source.series import PATCHES_DIR


def main(args: argparse.Namespace) -> int:
    job = job_of(args)
    return export.session(job.source(), job.root / PATCHES_DIR, args.branch, say)
