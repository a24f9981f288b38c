"""A PYTHONPATH entry may add modules to the Pythons a gate starts, never replace one (hostile pass 5).

Every Python searches PYTHONPATH before its standard library and its installed packages: a ``pytest.py`` there was the
route gate's pytest (tests/hostile/test_pass5_python_path_pytest.py), a ``serve/`` there the launcher ci digested and
shipped (test_pass5_launcher_path.py). An entry holding a module named like one of the standard library's, like one
this Python has installed elsewhere, or like the project's own packages (but the project's folders themselves) is
refused in one line naming the variable, the entry and the module; nothing starts.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import zipfile
from pathlib import Path

import pytest

from ci import command
from ci import environment as program_environment
from ci.errors import Refused
from tests.support.messages import said

ROOT = Path(__file__).resolve().parents[2]


def installed(name: str) -> Path:
    """Where this Python imports the package ``name`` from, off PYTHONPATH (site-packages)."""
    spec = importlib.machinery.PathFinder.find_spec(name)
    assert spec is not None
    assert spec.submodule_search_locations is not None
    return Path(spec.submodule_search_locations[0])


INSTALLED = installed("pytest")
EXTENSION = importlib.machinery.EXTENSION_SUFFIXES[0]


def refusal(*entries: Path | str) -> str | None:
    return program_environment.replaced_module([str(e) for e in entries])


@pytest.mark.parametrize(
    ("name", "module", "theirs"),
    [
        ("json.py", "json", "the standard library's json"),
        ("email/__init__.py", "email", "the standard library's email"),
        ("sys.py", "sys", "the standard library's sys"),  # built in: never imported from there, refused all the same
        ("pytest.py", "pytest", str(INSTALLED)),
        ("_pytest/__init__.py", "_pytest", str(INSTALLED.with_name("_pytest"))),
        (f"pytest{EXTENSION}", "pytest", str(INSTALLED)),  # a compiled module is imported ahead of any source
        ("pytest.pyc", "pytest", str(INSTALLED)),  # bytecode alone is imported too
        ("serve/__init__.py", "serve", str(ROOT / "serve")),
        ("tests/__init__.py", "tests", str(ROOT / "tests")),
    ],
)
def test_an_entry_that_replaces_a_module_is_refused(tmp_path: Path, name: str, module: str, theirs: str) -> None:
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("")
    held = tmp_path / name.split("/")[0]
    assert refusal(tmp_path) == program_environment.REPLACES_MODULE.format(entry=tmp_path, module=module, held=held, theirs=theirs)


def test_an_entry_that_adds_modules_is_passed(tmp_path: Path) -> None:
    """A module of a name found nowhere else, a folder without __init__ (a namespace portion, which a regular package
    of the same name found later wins over), files that are not modules, an entry not there."""
    (tmp_path / "onebit_site_extra.py").write_text("")
    (tmp_path / "pytest").mkdir()
    (tmp_path / "pytest" / "plugin.py").write_text("")
    (tmp_path / "json.txt").write_text("")
    (tmp_path / "json-1.0.dist-info").mkdir()
    assert refusal(tmp_path, tmp_path / "not-there") is None


def test_the_projects_own_folders_may_be_on_the_python_path() -> None:
    """The checkout itself (tests that start python -m ci elsewhere put it there): its ci, serve and tests are the
    project's."""
    assert refusal(ROOT) is None


def test_a_folder_holding_another_serve_is_refused(tmp_path: Path) -> None:
    """tests/ holds a package serve (the launcher's tests): as a PYTHONPATH entry it would be the launcher."""
    assert refusal(ROOT / "tests") == program_environment.REPLACES_MODULE.format(
        entry=ROOT / "tests", module="serve", held=ROOT / "tests" / "serve", theirs=ROOT / "serve"
    )


def test_an_archive_on_the_python_path_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "modules.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("pytest.py", "def main(args):\n    return 0\n")
    assert refusal(archive) == program_environment.NOT_A_FOLDER.format(entry=archive)


def test_nothing_starts_under_a_python_path_that_replaces_a_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pytest.py").write_text("raise SystemExit('the planted pytest ran')\n")
    ran = tmp_path / "ran"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(tmp_path / "not-there"), str(tmp_path))))
    with pytest.raises(Refused) as refused:
        command.run([sys.executable, "-c", f"open({str(ran)!r}, 'w').close()"], quiet=True)
    assert said(program_environment.REPLACES_MODULE, refused.value.message, entry=tmp_path, module="pytest")
    assert not ran.exists()
