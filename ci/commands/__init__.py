"""The commands: one module per nox session, the only place where stages meet.

Each command resolves its job once (:class:`~ci.commands.job.Job`: pins.yaml, the series, the profile, the
toolchain, the build plan and its key), then calls the stages in pipeline order and hands them values. Stages import
only earlier stages and the edges (``ci/*.py``); ``ci/cli.py`` parses and dispatches to ``main(args)`` here.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ci.errors import ConfigError

if TYPE_CHECKING:
    from ci.commands.job import Job

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_A_FOLDER = "{flag} {path}: not a folder{above}; name a folder for {what} (made when missing)"
ABOVE = " ({file} is there, and is not one)"  # NOT_A_FOLDER's above, when a file above the path is the problem


def say(line: str) -> None:
    print(line, flush=True)


def given(value: str | None) -> Path | None:
    """A path as given: messages name it the way the user wrote it."""
    return Path(value) if value else None


def folder(value: str | None, flag: str, what: str) -> Path | None:
    """:func:`given`, for a flag that names a folder to write ``what`` in: checked by :func:`a_folder`."""
    return a_folder(Path(value), flag, what) if value else None


def a_folder(path: Path, flag: str, what: str) -> Path:
    """``path``, a folder to write ``what`` in (made when missing); refused in one line naming ``flag`` when a file
    (or anything but a folder) is there or above it. Checked before anything runs: ``--out FILE`` once ran a whole
    gate and then said only "FILE/equivalence-logs: Not a directory"."""
    for place in (path, *path.parents):
        if os.path.isdir(place):  # follows a link to a folder, as mkdir does
            return path
        if os.path.lexists(place):
            above = "" if place == path else ABOVE.format(file=place)
            raise ConfigError(NOT_A_FOLDER.format(flag=flag, path=path, above=above, what=what))
    return path


def absolute(value: str | None) -> Path | None:
    """A path made absolute now: it is recorded, or used after a change of directory."""
    return Path(value).resolve() if value else None


def job_of(args: argparse.Namespace) -> Job:
    """The command's job, resolved once (``--root``, else the nearest pins.yaml at or above the working directory)."""
    from ci.commands.job import Job

    if getattr(args, "_job", None) is None:
        args._job = Job.resolve(Path(args.root) if args.root else None, session=str(getattr(args, "command", "build")).replace("-", "_"))
    job: Job = args._job
    return job


def root_or_cwd(args: argparse.Namespace) -> Path:
    """The project's root, or the working directory outside a project."""
    from ci.pin.project import find_project

    try:
        return find_project(Path(args.root) if args.root else None).root
    except ConfigError:
        return Path.cwd()
