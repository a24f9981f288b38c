"""``nox -s report -- --out DIR [LEDGER ...]``: a static site of every record of the ledgers given (default: the
release ledger and every try's), a table per pin and profile and a chart across pins of each figure."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from ci.commands import a_folder, root_or_cwd, say
from ci.errors import ConfigError
from ci.files import shown
from ci.release import figures, ledger, site
from ci.release.figures import TRY_DIR

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_LEDGER = "no ledger to report: give LEDGER paths, or gate a build first (nox -s gpu_tests, nox -s try); looked for {looked}"
NOT_A_LEDGER = "{path}: not a file; give a ledger.jsonl"
WROTE = "report: {records} records of {pins} pins, {charts} charts: {index}"


def default_ledgers(root: Path) -> list[Path]:
    """The release ledger and every try's, those that exist."""
    found = [ledger.ledger_path(ledger.default_results_dir(root))]
    found += sorted((root / TRY_DIR).glob("*/results/" + ledger.LEDGER))
    return [p for p in found if p.is_file()]


def session(root: Path, ledgers: Sequence[Path], out: Path, title: str, say: Callable[[str], None]) -> Path:
    paths = list(ledgers) or default_ledgers(root)
    if not paths:
        raise ConfigError(NO_LEDGER.format(looked=shown(ledger.ledger_path(ledger.default_results_dir(root)), root)))
    for path in paths:
        if not path.is_file():
            raise ConfigError(NOT_A_LEDGER.format(path=path))
    report = figures.read_ledgers(paths, root, ledger.signing_key())
    index = site.write(report, out, title)
    say(WROTE.format(records=len(report.rows), pins=len(report.pins), charts=len(report.charts), index=shown(index, root)))
    return index


def main(args: argparse.Namespace) -> int:
    out = a_folder(Path(args.out), "--out", "the report")
    session(root_or_cwd(args), [Path(p) for p in args.ledgers], out.resolve(), args.title, say)
    return 0
