"""Only source is imported (issue 43, item 2). A compiled ``judge.cpython-311-x86_64-linux-gnu.so`` (or ``.abi3.so``,
``.so``) beside ``judge.py`` is imported ahead of it, and the look for strays knew bytecode and links only: a weakened
judge passed 35/36 and ship wrote the wheel, ``git diff`` showing nothing. A ``.pth`` under ci/ or serve/ is no
source either. Each is a stray now, refused at start and named.

Each attack runs in a copy of ci/ and serve/ (never in the checkout, which other sessions import).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ci import cli, digests
from tests.hostile.test_judge_bytecode import MATRIX, PLANTED, plain_env, python, tree

EXTENSION = """
#include <Python.h>
static PyObject *matrix(PyObject *self, PyObject *args) { PySys_WriteStdout("PLANTED\\n"); return PyLong_FromLong(0); }
static PyMethodDef methods[] = {{"matrix", matrix, METH_VARARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "build", NULL, -1, methods};
PyMODINIT_FUNC PyInit_build(void) { return PyModule_Create(&module); }
"""


def compiled_build_module(work: Path, suffix: str) -> Path:
    """A real extension module ``ci/commands/build<suffix>`` whose ``matrix`` says PLANTED: what an import of
    ``ci.commands.build`` loads ahead of build.py."""
    source = work.parent / "build_ext.c"
    source.write_text(EXTENSION)
    target = work / "ci" / "commands" / f"build{suffix}"
    include = sysconfig.get_paths()["include"]
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{include}", "-o", str(target), str(source)], check=True, capture_output=True)
    return target


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the extension module")
def test_a_compiled_module_beside_a_judge_is_refused_at_start_and_named(tmp_path: Path) -> None:
    work = tree(tmp_path)
    planted = compiled_build_module(work, ".cpython-311-x86_64-linux-gnu.so" if sys.version_info[:2] == (3, 11) else ".abi3.so")
    attack = python(work, "-c", "import ci.commands.build as b; print(b.__file__)")
    assert attack.stdout.strip() == str(planted), attack  # the import takes the compiled module: the attack is real
    done = python(work, "-m", "ci", *MATRIX)
    assert PLANTED not in done.stdout
    why = digests.EXTENSION_MODULE.format(module="build")
    assert done.stderr == cli.ERROR.format(message=digests.STRAY.format(path=f"ci/commands/{planted.name}", why=why, more="")) + "\n"
    assert done.returncode == 4


@pytest.mark.parametrize("name", ["judge.cpython-311-x86_64-linux-gnu.so", "judge.abi3.so", "judge.so"])
def test_every_extension_suffix_beside_a_source_is_a_stray(tmp_path: Path, name: str) -> None:
    work = tree(tmp_path)
    (work / "ci" / "gates" / "backend_ops" / name).write_bytes(b"\x7fELF")
    found = digests.strays(work / "ci")
    assert found == [(work / "ci" / "gates" / "backend_ops" / name, digests.EXTENSION_MODULE.format(module="judge"))]


def test_a_pth_file_under_the_launcher_is_a_stray(tmp_path: Path) -> None:
    work = tree(tmp_path)
    (work / "serve" / "hook.pth").write_text("import os\n")
    assert digests.strays(work / "serve") == [(work / "serve" / "hook.pth", digests.PATH_FILE)]
    done = python(work, "-m", "ci", *MATRIX, env={**plain_env(), "PYTHONDONTWRITEBYTECODE": "1"})
    why = digests.PATH_FILE
    assert done.stderr == cli.ERROR.format(message=digests.STRAY.format(path="serve/hook.pth", why=why, more="")) + "\n"


def test_the_checkouts_own_trees_hold_no_stray() -> None:
    root = Path(__file__).resolve().parents[2]
    assert digests.strays(root / "ci") == []
    assert digests.strays(root / "serve") == []
    assert os.path.isdir(root / "ci" / "prompts")  # data beside the sources is no stray
