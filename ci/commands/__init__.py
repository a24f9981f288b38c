"""The commands: one module per nox session, the only place where stages meet.

Each command resolves its job once (:class:`~ci.commands.job.Job`: pins.yaml, the series, the profile, the
toolchain, the build plan and its key), then calls the stages in pipeline order and hands them values. Stages import
only earlier stages and the edges (``ci/*.py``); ``ci/cli.py`` parses and dispatches to ``main(args)`` here.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ci.commands.job import Job


def say(line: str) -> None:
    print(line, flush=True)


def given(value: str | None) -> Path | None:
    """A path as given: messages name it the way the user wrote it."""
    return Path(value) if value else None


def absolute(value: str | None) -> Path | None:
    """A path made absolute now: it is recorded, or used after a change of directory."""
    return Path(value).resolve() if value else None


def job_of(args: argparse.Namespace) -> Job:
    """The command's job, resolved once (``--root``, else the nearest pins.yaml at or above the working directory)."""
    from ci.commands.job import Job

    if getattr(args, "_job", None) is None:
        args._job = Job.resolve(Path(args.root) if args.root else None)
    job: Job = args._job
    return job


def root_or_cwd(args: argparse.Namespace) -> Path:
    """The project's root, or the working directory outside a project."""
    from ci.errors import ConfigError
    from ci.pin.project import find_project

    try:
        return find_project(Path(args.root) if args.root else None).root
    except ConfigError:
        return Path.cwd()
