"""A module planted in the working directory does not run inside the launcher or ci (issue 36; a hostile pass).

``python -m`` puts the working directory first on sys.path, ahead of the standard library. The gates start the
launcher (``python -m serve serve``) in the job's folder, and nox starts ``python -m ci`` in the checkout: a
``json.py`` that a fork's build wrote there ran as part of either, unread by the digests (and inside ci, where the
ledger's key is). Both now start with ``-P`` (Python 3.11+) where the project is installed, as nox installs it: the
working directory is not searched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ci.gates.serving.launcher import safe_path
from ci.gates.serving.llama import LAUNCHER

ROOT = Path(__file__).resolve().parents[2]
PLANTED = "import pathlib; pathlib.Path(__file__).with_name('ran').write_text('planted json ran')\nraise SystemExit(3)\n"


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    (tmp_path / "json.py").write_text(PLANTED)
    return tmp_path


@pytest.mark.skipif(sys.version_info < (3, 11) or not safe_path(), reason="-P is Python 3.11's, and the project must be installed")
def test_the_launcher_started_as_the_gates_start_it_runs_no_module_of_its_folder(planted: Path) -> None:
    done = subprocess.run([sys.executable, *LAUNCHER, "--help"], cwd=planted, capture_output=True, text=True, check=False)
    assert not (planted / "ran").exists(), done.stderr
    assert done.returncode == 0, done.stderr
    # and without -P the same start runs it: the test sees what it guards against
    subprocess.run([sys.executable, *LAUNCHER[1:], "--help"], cwd=planted, capture_output=True, text=True, check=False)
    assert (planted / "ran").read_text() == "planted json ran"


def test_nox_starts_ci_without_its_working_directory_on_the_path() -> None:
    noxfile = (ROOT / "noxfile.py").read_text()
    assert '_SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()' in noxfile
    assert '"python", *_SAFE_PATH, "-m", "ci"' in noxfile
