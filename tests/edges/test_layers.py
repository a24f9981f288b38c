"""The house's layers, read from the source (every import, function-level and TYPE_CHECKING ones included): no module
imports a later stage, and no module reaches itself through its imports (issue 21); the entry point imports only edge
modules, and no module of ci/ is over 500 lines (issue 43: each concern in a room of its own); no gate package imports
another's, directly or through a shared room (issue 42, item 6: the order of the gate list is no hidden input)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from ci.gates.registry import names

CI = Path(__file__).resolve().parents[2] / "ci"
# the pipeline, in order: a module may import its own stage and earlier ones; the edges are ci/*.py
STAGES = ("edges", "pin", "source", "compile", "gates", "release", "commands", "cli")
ENTRY = {"ci.cli": "cli", "ci.__main__": "cli"}


def module_of(path: Path, ci: Path) -> str:
    parts = path.relative_to(ci.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage_of(module: str) -> str:
    if module in ENTRY:
        return ENTRY[module]
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in STAGES else "edges"


def imports(ci: Path = CI) -> dict[str, set[str]]:
    """Each module of ci/ and the ci modules it imports (``from ci.x import y`` counts as ci.x.y when that is a module)."""
    modules = {module_of(p, ci): p for p in ci.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ci":
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    found.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.split(".")[0] == "ci"}
        out[name] = {m for m in found if m != name and m != "ci"}
    return out


def later_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} ({stage_of(m)}) imports {d} ({stage_of(d)})" for m, deps in graph.items() for d in deps if STAGES.index(stage_of(d)) > STAGES.index(stage_of(m))
    )  # fmt: skip


def cycles(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for start in sorted(graph):
        seen: set[str] = set()
        todo = sorted(graph[start])
        while todo:
            m = todo.pop()
            if m == start:
                found.append(start)
                break
            if m not in seen:
                seen.add(m)
                todo += sorted(graph.get(m, ()))
    return found


def test_no_module_imports_a_later_stage() -> None:
    graph = imports()
    assert {stage_of(m) for m in graph} == set(STAGES)
    assert later_imports(graph) == []


def test_no_module_reaches_itself_through_its_imports() -> None:
    assert cycles(imports()) == []


MAX_LINES = 500


def long_modules(ci: Path = CI) -> list[str]:
    """Each module of ``ci`` over :data:`MAX_LINES` lines, with its count."""
    found = ((p, len(p.read_text(encoding="utf-8").splitlines())) for p in sorted(ci.rglob("*.py")))
    return [f"{p.relative_to(ci.parent).as_posix()}: {n} lines" for p, n in found if n > MAX_LINES]


def entry_imports(graph: dict[str, set[str]]) -> list[str]:
    """What the entry point (ci.cli) imports that is not an edge module (ci/*.py): it dispatches to the commands by
    name, and reads nothing of a stage itself."""
    return sorted(f"ci.cli imports {d} ({stage_of(d)})" for d in graph["ci.cli"] if stage_of(d) != "edges")


def test_no_module_of_ci_is_over_500_lines() -> None:
    assert long_modules() == []


def test_the_entry_point_imports_only_edge_modules() -> None:
    assert entry_imports(imports()) == []


def test_the_checks_see_a_long_module_and_a_stage_imported_by_the_entry_point(tmp_path: Path) -> None:
    """A module grown past 500 lines and a gate package imported by cli.py, planted in a copy of ci/, are named."""
    copy = tmp_path / "ci"
    shutil.copytree(CI, copy, ignore=shutil.ignore_patterns("__pycache__"))
    words = copy / "words.py"
    words.write_text(words.read_text(encoding="utf-8") + "\n" * MAX_LINES)
    cli = copy / "cli.py"
    cli.write_text(cli.read_text(encoding="utf-8") + "\n\ndef _late() -> None:\n    from ci.gates.serving import launcher  # noqa: F401\n")
    assert "ci/words.py" in [line.split(":")[0] for line in long_modules(copy)]
    assert "ci/words.py" not in [line.split(":")[0] for line in long_modules()]
    assert entry_imports(imports(copy)) == ["ci.cli imports ci.gates.serving.launcher (gates)"]


def test_the_checks_see_a_planted_late_import_and_the_circle_it_makes(tmp_path: Path) -> None:
    """A function-level import of a later stage, planted in a copy of ci/, is named, and so is the circle it closes."""
    copy = tmp_path / "ci"
    shutil.copytree(CI, copy, ignore=shutil.ignore_patterns("__pycache__"))
    verify = copy / "pin" / "verify.py"
    verify.write_text(verify.read_text(encoding="utf-8") + "\n\ndef _late() -> None:\n    from ci.commands import build  # noqa: F401\n")
    graph = imports(copy)
    assert later_imports(graph) == ["ci.pin.verify (pin) imports ci.commands.build (commands)"]
    assert "ci.pin.verify" not in cycles(imports())
    assert "ci.pin.verify" in cycles(graph)  # commands.build imports pin.verify: the planted import closes a circle


def test_the_readme_layout_table_lists_every_module() -> None:
    """Each module of ci/ and serve/ is named in the README's row of its package (the edges: ci/*.py)."""
    readme = (CI.parent / "README.md").read_text(encoding="utf-8")
    rows = {ln.split("|")[1].strip(): ln for ln in readme.splitlines() if ln.startswith("| ")}
    missing = []
    for path in sorted([*CI.rglob("*.py"), *(CI.parent / "serve").rglob("*.py")]):
        if path.name == "__init__.py":
            continue
        package = path.parent.relative_to(CI.parent).as_posix()
        row = rows.get("edges" if package == "ci" else f"`{package}/`", "")
        if f"`{path.name}`" not in row:
            missing.append(path.relative_to(CI.parent).as_posix())
    assert missing == []


# the packages the registry names; what they share lives in the rooms beside them (ci/gates/serving, tiny, shapes and the
# top-level ci/gates/*.py), which import no gate package, but the registry each gate's gate.py
GATE_PACKAGES = frozenset(names())
REGISTRY = "ci.gates.registry"


def gate_of(module: str) -> str | None:
    """The gate package ``module`` belongs to, or None for a module of no gate (a shared room, another stage)."""
    parts = module.split(".")
    return parts[2] if len(parts) >= 3 and parts[:2] == ["ci", "gates"] and parts[2] in GATE_PACKAGES else None


def cross_gate_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a gate package's module by another gate package, or by a shared room of ci/gates/ (through which
    one gate would reach another): the registry's import of each ``gate.py`` alone is the registry's work."""
    found = []
    for m, deps in graph.items():
        if not m.startswith("ci.gates."):
            continue
        own = gate_of(m)
        for d in deps:
            other = gate_of(d)
            if other is None or other == own or (m == REGISTRY and d == f"ci.gates.{other}.gate"):
                continue
            found.append(f"{m} ({own or 'shared'}) imports {d} ({other})")
    return sorted(found)


def test_no_gate_package_imports_another() -> None:
    assert cross_gate_imports(imports()) == []


def test_the_check_sees_a_gate_importing_another_directly_and_through_a_shared_room(tmp_path: Path) -> None:
    """A function-level import of the equivalence gate's plan in the perf gate's run, and of the oracle's judge in the
    shared bench, planted in a copy of ci/, are each named."""
    copy = tmp_path / "ci"
    shutil.copytree(CI, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for module, planted in (("gates/perf/run.py", "ci.gates.equivalence import plan"), ("gates/serving/bench.py", "ci.gates.oracle import judge")):
        path = copy / module
        path.write_text(path.read_text(encoding="utf-8") + f"\n\ndef _late() -> None:\n    from {planted}  # noqa: F401\n")
    assert cross_gate_imports(imports(copy)) == [
        "ci.gates.perf.run (perf) imports ci.gates.equivalence.plan (equivalence)",
        "ci.gates.serving.bench (shared) imports ci.gates.oracle.judge (oracle)",
    ]
