"""Every docstring of ci/ and serve/ (module, class, function) says what the thing is and why in a few lines: at most
600 characters (issue 43, item 8). The history of an attack or a bug belongs to the test that holds it, and detail a
user needs to docs/."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ci", "serve")
MAX_CHARS = 600
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def long_docstrings(root: Path = ROOT) -> list[str]:
    """Each docstring under ``root``'s packages over :data:`MAX_CHARS` characters, as written (``clean=False``): its
    file, the name of what it documents and its length."""
    found = []
    for path in sorted(p for package in PACKAGES for p in (root / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, DOCUMENTED):
                continue
            doc = ast.get_docstring(node, clean=False)
            if doc and len(doc) > MAX_CHARS:
                name = "<module>" if isinstance(node, ast.Module) else node.name
                found.append(f"{path.relative_to(root).as_posix()}: {name}: {len(doc)} characters")
    return found


def test_no_docstring_of_ci_or_serve_is_over_600_characters() -> None:
    assert long_docstrings() == []


def test_the_check_sees_a_long_docstring_of_a_module_a_class_and_a_function(tmp_path: Path) -> None:
    """Docstrings of 601 characters, planted in a copy of ci/ and serve/, are each named; one of 600 is not."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    long, fits = "x" * (MAX_CHARS + 1), "x" * MAX_CHARS
    (tmp_path / "ci" / "planted.py").write_text(
        f'"""{long}"""\n\n\nclass Plant:\n    """{long}"""\n\n\ndef fits() -> None:\n    """{fits}"""\n'
    )
    (tmp_path / "serve" / "planted.py").write_text(f'async def grow() -> None:\n    """{long}"""\n')
    planted = [line for line in long_docstrings(tmp_path) if "planted.py" in line]
    assert planted == [
        "ci/planted.py: <module>: 601 characters",
        "ci/planted.py: Plant: 601 characters",
        "serve/planted.py: grow: 601 characters",
    ]
