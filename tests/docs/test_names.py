"""The docs name what exists (issue 41): every project file they give in backticks is in the tree, every ``nox -s``
session is the noxfile's and every flag after its ``--`` is one its command takes, every ``1bit serve`` flag is serve's,
every gate of the registry has its row in docs/gates.md, and docs/ci.md's time limit is ci.yml's. A stale name (a
``ci/gates/names.py`` that never existed, a test file in the wrong folder) fails here, not in a reader's hands."""

from __future__ import annotations

import argparse
import ast
import re
import shlex
import subprocess
from pathlib import Path

import yaml

from ci.cli import COMMANDS
from ci.gates.registry import GATES
from ci.parser import parser as ci_parser
from serve.cli import parser as serve_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
CODE = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
# a path of this project: under one of its folders (a fork's file, tests/test-*.cpp or tools/server/*.cpp, is written
# the same way: C and C++ sources outside ci/ are the fork's)
OURS = re.compile(r"^(ci|serve|tests|tools|benchmarks|docs|patches|\.github|\.ci)/[\w./-]*$")
FORKS = re.compile(r"\.(c|cc|cpp|cu|h|hpp|comp)$")
PLACEHOLDER = re.compile(r"[A-Z]{2,}|__pycache__")  # ci/gates/NAME/, patches/NAME.patch; bytecode folders
MADE = {"serve/release.json"}  # written by ship into the wheel, not kept in the tree
HISTORICAL = re.compile(r"^`? at [0-9a-f]{7}")  # "`ci/command.py` at b782490": a file as it was at that commit
NOX = re.compile(r"nox -s ((?:[a-z_]+ ?)+?)(?: -- ([^`|\n]*))?(?=$|[`|\n]|\s{2,}#|,| then| where| on a)")
SERVE = re.compile(r"1bit serve ([^`|\n]*)")


def tracked() -> tuple[set[str], set[str]]:
    files = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
    folders = {str(Path(f).parent) for f in files} | {str(p) for f in files for p in Path(f).parents}
    return files, folders


def spans(text: str) -> list[str]:
    """The code of a doc: its inline spans and each line of its fenced blocks."""
    out = [line for block in FENCE.findall(text) for line in block.splitlines()[1:-1]]
    return out + CODE.findall(FENCE.sub("", text))


def test_every_project_file_the_docs_name_is_in_the_tree() -> None:
    files, folders = tracked()
    missing = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for m in CODE.finditer(line):
                path = m.group(1).split("::")[0].split("#")[0].rstrip(".,:;").rstrip("/")
                if not OURS.match(path) or FORKS.search(path) or PLACEHOLDER.search(path) or path in MADE:
                    continue
                if HISTORICAL.match(line[m.end() :]) or path in files or path in folders:
                    continue
                missing.append(f"{doc.relative_to(ROOT)}:{number}: `{path}` is not in the tree")
    assert not missing, "\n".join(missing)


def noxfile_sessions() -> dict[str, str | None]:
    """Each session of noxfile.py and the ``python -m ci`` command it runs (None: it runs pytest, ruff or mypy)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    out: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any("session" in ast.unparse(d) for d in node.decorator_list):
            named = [k.value.value for d in node.decorator_list if isinstance(d, ast.Call) for k in d.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)]
            calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and ast.unparse(c.func) == "_ci"]
            out[str(named[0]) if named else node.name] = calls[0].args[1].value if calls and isinstance(calls[0].args[1], ast.Constant) else None  # type: ignore[assignment]
    return out


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def command_options() -> dict[str, set[str]]:
    top = ci_parser({name: (lambda args: 0) for name in COMMANDS})
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return {name: options_of(p) for name, p in sub.choices.items()}


def flags(args: str) -> list[str]:
    """The flags of a command line as a doc writes it: [optional] parts included, quoted values and comments not."""
    args = args.split(";")[0]  # "--profile P; or give --llama-server PATH": prose after the command
    try:
        words = shlex.split(args.replace("[", " ").replace("]", " ").replace("|", " "), comments=True)
    except ValueError:
        words = args.split()
    out = []
    for word in words:
        if word in ("&&", ";", "--"):
            break
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", word):  # a quoted "--dflash D.gguf" is a value, not a flag
            out.append(word.split("=")[0])
    return out


def test_every_nox_session_and_flag_the_docs_give_exists() -> None:
    sessions = noxfile_sessions()
    options = command_options()
    wrong = []
    for doc in DOCS:
        for code in spans(doc.read_text(encoding="utf-8")):
            for m in NOX.finditer(code):
                for name in m.group(1).split():
                    if name not in sessions:
                        wrong.append(f"{doc.name}: `nox -s {name}`: no such session (nox -l)")
                    elif m.group(2) and sessions[name] is not None:
                        known = options[sessions[name]]  # type: ignore[index]
                        wrong += [f"{doc.name}: `nox -s {name} -- {m.group(2).strip()}`: {flag} is not a flag of {sessions[name]}" for flag in flags(m.group(2)) if flag not in known]
    assert not wrong, "\n".join(wrong)


def test_every_1bit_serve_flag_the_docs_give_is_serves() -> None:
    known = options_of(serve_parser())
    wrong = []
    for doc in DOCS:
        for code in spans(doc.read_text(encoding="utf-8")):
            for m in SERVE.finditer(code):
                wrong += [f"{doc.name}: `1bit serve {m.group(1).strip()}`: {flag} is not serve's" for flag in flags(m.group(1)) if flag not in known]
    assert not wrong, "\n".join(wrong)


def test_docs_gates_has_a_row_for_every_gate_of_the_registry() -> None:
    text = (ROOT / "docs" / "gates.md").read_text(encoding="utf-8")
    rows = {m.group(1) for m in re.finditer(r"^\| `?([a-z_]+)`? \|", text, re.MULTILINE)}
    assert {g.name for g in GATES} <= rows, f"docs/gates.md's table lacks {sorted({g.name for g in GATES} - rows)}"


def test_docs_ci_gives_cis_own_time_limits() -> None:
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8"))["jobs"]
    limits = {job["timeout-minutes"] for job in jobs.values() if "timeout-minutes" in job}
    said = {int(n) for n in re.findall(r"(\d+)-minute limit", (ROOT / "docs" / "ci.md").read_text(encoding="utf-8"))}
    assert said <= limits, f"docs/ci.md names a {sorted(said - limits)}-minute limit; ci.yml's jobs have {sorted(limits)}"
    assert jobs["no-gpu"]["timeout-minutes"] in said, "docs/ci.md does not name the no-GPU jobs' limit"
