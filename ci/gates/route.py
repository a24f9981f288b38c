"""The route gate: the serve launcher's no-GPU tests (``pytest tests/serve`` of this checkout), as one gate."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from ci.command import run
from ci.errors import ConfigError
from ci.gates import names
from ci.gates.results import CaseResult, GateResult, Status, case_counts

GATE = names.ROUTE
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the onebit-ci checkout: the launcher and its route tests


LAUNCHER_SKIPS = ("__pycache__", "*.pyc")  # what neither the digest nor the wheel holds (shutil.ignore_patterns)
# pytest's environment options: PYTEST_ADDOPTS="-k x" ran 5 of 180 tests, a plugin in PYTEST_PLUGINS skipped them all,
# and either record passed. The gate runs the whole suite as the checkout says, so these are left out.
NOT_PASSED_ON = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")
# and no plugin that an installed package declares (entry point pytest11) is loaded: a package on the path whose
# plugin deselected a test made the record "1/1 passed" on a suite of two. tests/serve needs none of them.
ENV_SET = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
# pytest, imported with the checkout taken off the front of sys.path: ``python -m pytest`` in the checkout imported a
# pytest.py there instead, which ran pytest with a plugin of its own that deselected a test ("1/1 passed" of two).
# Not ``python -I`` (3.11's -P is too new): it would drop PYTHONPATH, which a machine with packages in --target uses.
PYTEST_NOT_FROM_THE_CHECKOUT = "import sys; del sys.path[0]; import pytest; sys.exit(pytest.main(sys.argv[1:]))"
SKIPPED = "{count} route test(s) skipped ({first}): the route gate runs every test; find what skips them"
NO_PROJECT_CONFIG = "{config}: missing; the route gate runs pytest with the project's own configuration and no other"
# the one pytest configuration the gate reads (-c): pytest takes the first it finds from tests/serve upwards, so a
# pytest.ini, tox.ini or setup.cfg added for the gate run with -k, then removed, recorded a pass on fewer tests
PROJECT_CONFIG = "pyproject.toml"
# What decides which route tests run and how, under the checkout: the record is bound to their digest, so a conftest
# edited (or a root conftest.py added) for the gate run with a hook that drops tests, then put back, no longer ships.
# tests/conftest.py registers tests/support's fixtures for the whole suite, and tests/serve imports tests/support.
ROUTE_TESTS = (PROJECT_CONFIG, "conftest.py", "tests/__init__.py", "tests/conftest.py", "tests/serve", "tests/support")
BYTECODE_FOLDER = "PYTHONPYCACHEPREFIX"


def launcher_dir() -> Path:
    """The serve package ship puts in the wheel: the one this Python imports (this checkout's, in nox's sessions)."""
    import serve

    return Path(serve.__file__).resolve().parent


def launcher_sha256(directory: Path | None = None) -> str:
    """One digest of the launcher's files (paths and contents), as ship would copy them: the route and equivalence
    records are bound to it, so a launcher edited after the gates ran is not shipped on their evidence."""
    root = directory or launcher_dir()
    return _files_sha256(root, _files_under(root))


def route_tests_sha256(source: Path | None = None) -> str:
    """One digest of the files that decide what the route gate runs (:data:`ROUTE_TESTS` of the checkout, each that
    exists), as :func:`launcher_sha256` reads files: the route record is bound to it."""
    root = source or SOURCE_ROOT
    paths = (root / name for name in ROUTE_TESTS)
    return _files_sha256(root, [f for p in paths for f in (_files_under(p) if p.is_dir() else [p] if p.is_file() else [])])


def _files_under(root: Path) -> list[Path]:
    skipped = shutil.ignore_patterns(*LAUNCHER_SKIPS)  # the very filter ship's copytree applies, name by name
    return [p for p in root.rglob("*") if p.is_file() and not any(skipped("", [part]) for part in p.relative_to(root).parts)]


def _files_sha256(root: Path, files: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@contextlib.contextmanager
def own_bytecode() -> Iterator[dict[str, str]]:
    """The environment for a Python a gate starts on the launcher (its tests, ``python -m serve``): its bytecode in a
    fresh folder, removed afterwards, so the __pycache__ folders of the tree are neither read nor written. Python
    checks a .pyc only by its source's mtime and size: a good module's .pyc left in serve/__pycache__ beside a bad
    source of the same size, its mtime put back, was what the tests judged, while the digest and the wheel held the
    source."""
    with tempfile.TemporaryDirectory(prefix="onebit-bytecode-", ignore_cleanup_errors=True) as folder:
        yield {BYTECODE_FOLDER: folder}


def with_bytecode(env: Mapping[str, str], folder: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the bytecode ``folder`` (:func:`own_bytecode`, :func:`process_bytecode`) and bytecode written there:
    under PYTHONDONTWRITEBYTECODE (set on this machine) nothing was written, and every launcher compiled the standard
    library and its packages again, 0.34-0.36 s a start against 0.10 s."""
    return {**{k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}, **folder}


_LAUNCHERS_BYTECODE: list[str] = []  # this process's folder for process_bytecode, once made
_LAUNCHERS_LOCK = threading.Lock()


def process_bytecode() -> dict[str, str]:
    """:func:`own_bytecode` for the launchers a command starts (``python -m serve`` under a gate's llama-servers): one
    fresh folder for this process, made on first use and removed when it exits, so serve/ is compiled once per
    command, not once per server. Made here, it holds nothing planted before the command ran, as a folder per server
    would not either. What it costs, the equivalence and serve tests (256) on 2 cores: 22.3-24.3 s with the tree's
    __pycache__, 30.1-36.8 s with this folder, 37.1 s with a folder per server; most of it is the standard library and
    the packages each command compiles again, not serve/."""
    with _LAUNCHERS_LOCK:
        if not _LAUNCHERS_BYTECODE:
            folder = tempfile.mkdtemp(prefix="onebit-bytecode-")
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _LAUNCHERS_BYTECODE.append(folder)
        return {BYTECODE_FOLDER: _LAUNCHERS_BYTECODE[0]}


def route_gate(out: Path, source: Path = SOURCE_ROOT) -> GateResult:
    """``pytest tests/serve`` of this onebit-ci checkout in a child process, its JUnit read back into a GateResult."""
    if not (source / "tests" / "serve").is_dir():
        raise ConfigError(f"{source}: no tests/serve; run the gates from a checkout of onebit-ci, not an installed copy")
    if not (source / PROJECT_CONFIG).is_file():
        raise ConfigError(NO_PROJECT_CONFIG.format(config=source / PROJECT_CONFIG))
    junit = out / "route.pytest.junit.xml"
    junit.unlink(missing_ok=True)
    started = time.monotonic()
    with own_bytecode() as bytecode:
        argv = [sys.executable, "-c", PYTEST_NOT_FROM_THE_CHECKOUT, "tests/serve", "-c", PROJECT_CONFIG, "--rootdir", ".", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
        env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED_ON}
        done = run(argv, cwd=source, env=with_bytecode({**env, **ENV_SET}, bytecode), check=False, what="pytest tests/serve")
    seconds = time.monotonic() - started
    cases = _junit_cases(junit) if junit.is_file() else []
    problems = []
    if not cases:
        problems.append(f"pytest tests/serve ran no test (exit status {done.returncode}): {done.output.strip().splitlines()[-1:] or ''}")
    failed = [c for c in cases if c.status in (Status.FAILED, Status.ERROR)]
    problems += [f"{c.classname}::{c.name}: {c.message}" for c in failed[:20]]
    skipped = [c for c in cases if c.status is Status.SKIPPED]
    if skipped:
        problems.append(SKIPPED.format(count=len(skipped), first=f"{skipped[0].classname}::{skipped[0].name}: {skipped[0].message}"))
    if done.returncode != 0 and not problems:
        problems.append(f"pytest tests/serve exited with status {done.returncode}")
    status = Status.PASSED if not problems else Status.FAILED
    summary = f"{sum(c.status is Status.PASSED for c in cases)}/{len(cases)} route tests passed"
    return GateResult("route", status, summary, tuple(cases), tuple(problems), case_counts(cases), seconds=seconds)


def _junit_cases(path: Path) -> list[CaseResult]:
    from junitparser import Error, Failure, JUnitXml, Skipped

    out = []
    for suite in JUnitXml.fromfile(str(path)):
        for case in suite:
            status, message = Status.PASSED, ""
            for r in case.result:
                if isinstance(r, Failure):
                    status, message = Status.FAILED, (r.message or "")
                elif isinstance(r, Error):
                    status, message = Status.ERROR, (r.message or "")
                elif isinstance(r, Skipped):
                    status, message = Status.SKIPPED, (r.message or "")
            out.append(CaseResult(case.name, status, message.splitlines()[0] if message else "", case.classname or "", seconds=case.time or 0.0))
    return out
