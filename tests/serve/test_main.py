"""``python -m serve`` run by a Python that lacks the launcher's packages says so in one line and names the Python
that has them (issue 41: the docs' ``python -m serve serve ...`` ended in an ImportError traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from serve import errors
from tests.support.messages import said

ROOT = Path(__file__).resolve().parents[2]
# the gguf package made unimportable, then serve run as python -m serve runs it
WITHOUT_GGUF = "import sys, runpy; sys.modules['gguf'] = None; sys.argv[0] = 'serve'; runpy.run_module('serve', run_name='__main__')"


def test_a_python_without_gguf_gets_one_line_naming_the_environment_that_has_it(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_GGUF, "serve", "-m", "x.gguf"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert said(errors.NOT_INSTALLED, line, python=sys.executable), line
