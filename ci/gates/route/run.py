"""The route gate: the serve launcher's no-GPU tests (``pytest tests/route tests/serve`` of this checkout), as one
gate: the route tests (hadamard_route, recipes_route) and the launcher's other tests."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from pathlib import Path, PurePosixPath

from ci.command import environment, run
from ci.digests import files_sha256, files_under
from ci.errors import ConfigError
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.gates.route import NAME
from ci.gates.serving.launcher import SOURCE_ROOT, launcher_sha256, own_bytecode, with_bytecode

GATE = NAME


# pytest's environment options (PYTEST_ADDOPTS="-k x" ran 5 of 180 tests, a plugin in PYTEST_PLUGINS skipped them all,
# and either record passed) are not among what ci.environment.environment passes on: the gate runs the whole suite.
# and no plugin that an installed package declares (entry point pytest11) is loaded: a package on the path whose
# plugin deselected a test made the record "1/1 passed" on a suite of two. tests/serve needs none of them.
ENV_SET = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
# pytest, imported with the checkout taken off the front of sys.path: ``python -m pytest`` in the checkout imported a
# pytest.py there instead, which ran pytest with a plugin of its own that deselected a test ("1/1 passed" of two).
# Not ``python -I`` (3.11's -P is too new): it would drop PYTHONPATH, which a machine with packages in --target uses.
PYTEST_NOT_FROM_THE_CHECKOUT = "import sys; del sys.path[0]; import pytest; sys.exit(pytest.main(sys.argv[1:]))"
SKIPPED = "{count} route test(s) skipped ({first}): the route gate runs every test; find what skips them"
# the launcher or the files that decide its tests changed between the start of the run and its end (and may have been
# put back before the record): what the tests judged is not what the digests would say, so nothing counts
CHANGED_WHILE_RUNNING = "the launcher or its route tests changed while the tests ran: run the route gate again on an unchanged checkout"
JUNIT_UNREADABLE = "pytest's JUnit {junit} cannot be read ({why}): a full disk? the gate ran, but no verdict of its tests can be told"
NO_PROJECT_CONFIG = "{config}: missing; the route gate runs pytest with the project's own configuration and no other"
# the one pytest configuration the gate reads (-c): pytest takes the first it finds from tests/serve upwards, so a
# pytest.ini, tox.ini or setup.cfg added for the gate run with -k, then removed, recorded a pass on fewer tests
PROJECT_CONFIG = "pyproject.toml"
# What decides which route tests run and how, under the checkout: the record is bound to their digest, so a conftest
# edited (or a root conftest.py added) for the gate run with a hook that drops tests, then put back, no longer ships.
# tests/conftest.py registers tests/support's fixtures for the whole suite, and the launcher's tests import tests/support.
TEST_FOLDERS = ("tests/route", "tests/serve")  # what the gate runs, and must find
# and the attacks on the launcher alone (tests/hostile/test_route_reach.py holds the list to every test module that
# imports serve and no ci): with serve.recipes.env_problem returning None the gate had passed, the recipe refusal tests
# living in tests/hostile. Their slow tests need llama.cpp's binaries, which a machine without a GPU may not have.
LAUNCHER_ATTACKS = ("tests/hostile/test_recipe_launch_keys.py", "tests/hostile/test_serve_fuzz.py", "tests/hostile/test_serve_gated.py")
TESTS_RUN = (*TEST_FOLDERS, *LAUNCHER_ATTACKS)
NOT_SLOW = ("-m", "not slow")
ROUTE_TESTS = (PROJECT_CONFIG, *TESTS_RUN, "tests/support")
# and what pytest imports for each path it runs besides the path: the conftest.py of every folder from the root down to
# it, and the __init__.py of each package on the way. A tests/hostile/conftest.py added for the gate run, dropping the
# failing recipe tests, then removed, had left a route record that counted (hostile pass 5). Any suffix: a compiled
# conftest or __init__ is imported ahead of the .py beside it.
ON_THE_WAY = ("conftest", "__init__")


def route_test_files(source: Path | None = None) -> list[Path]:
    """The files that decide what the route gate runs and how: :data:`ROUTE_TESTS` of the checkout (each that exists,
    a folder's every file) and every file named :data:`ON_THE_WAY` in a folder from the root to each of
    :data:`TESTS_RUN`."""
    root = source or SOURCE_ROOT
    named = [root / name for name in ROUTE_TESTS]
    files = {f for p in named for f in (files_under(p) if p.is_dir() else [p] if p.is_file() else [])}
    for name in TESTS_RUN:
        parts = PurePosixPath(name).parts
        for folder in (root.joinpath(*parts[:depth]) for depth in range(len(parts))):
            with contextlib.suppress(OSError):
                files |= {p for p in folder.iterdir() if p.name.split(".", 1)[0] in ON_THE_WAY and p.is_file()}
    return sorted(files)


def route_tests_sha256(source: Path | None = None) -> str:
    """One digest of :func:`route_test_files`, as the launcher's digest reads files: the route record is bound to it,
    and a gate run during which it changed counts for nothing."""
    root = source or SOURCE_ROOT
    return files_sha256(root, route_test_files(root))


def pytest_argv(junit: Path, source: Path = SOURCE_ROOT) -> list[str]:
    """The gate's pytest, run in ``source``: the launcher's test folders and those of its attacks the checkout has."""
    tests = [*TEST_FOLDERS, *(t for t in LAUNCHER_ATTACKS if (source / t).is_file())]
    tier = NOT_SLOW if _declares_slow(source / PROJECT_CONFIG) else ()
    return [sys.executable, "-c", PYTEST_NOT_FROM_THE_CHECKOUT, *tests, *tier, "-c", PROJECT_CONFIG, "--rootdir", ".", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]


def _declares_slow(config: Path) -> bool:
    """Whether the project's pytest configuration declares the slow tier (pytest refuses ``-m`` on a marker it does not
    know, under --strict-markers): a marker line ``"slow: ..."``."""
    try:
        return re.search(r"""^\s*["']slow\s*:""", config.read_text(encoding="utf-8"), re.MULTILINE) is not None
    except (OSError, UnicodeError):
        return False


def route_gate(out: Path, source: Path = SOURCE_ROOT) -> GateResult:
    """``pytest tests/route tests/serve`` of this onebit-ci checkout in a child process, its JUnit read back into a GateResult."""
    for folder in TEST_FOLDERS:
        if not (source / folder).is_dir():
            raise ConfigError(f"{source}: no {folder}; run the gates from a checkout of onebit-ci, not an installed copy")
    if not (source / PROJECT_CONFIG).is_file():
        raise ConfigError(NO_PROJECT_CONFIG.format(config=source / PROJECT_CONFIG))
    junit = (out / "route.pytest.junit.xml").absolute()  # from the caller's folder: pytest runs in the checkout
    junit.unlink(missing_ok=True)
    started = time.monotonic()
    judged = (launcher_sha256(), route_tests_sha256(source))  # what the tests read, as they start
    with own_bytecode() as bytecode:
        argv = pytest_argv(junit, source)
        # the one environment every program gets (ci.environment.environment): no PYTEST_* of the caller's, no ledger key
        done = run(argv, cwd=source, env=with_bytecode(environment(given=ENV_SET), bytecode), check=False, what=f"pytest {' '.join(TEST_FOLDERS)}")
    seconds = time.monotonic() - started
    cases, unreadable = read_junit(junit) if junit.is_file() else ([], None)
    problems = [unreadable] if unreadable else []
    if not cases and not unreadable:
        problems.append(f"pytest {' '.join(TEST_FOLDERS)} ran no test (exit status {done.returncode}): {done.output.strip().splitlines()[-1:] or ''}")
    failed = [c for c in cases if c.status in (Status.FAILED, Status.ERROR)]
    problems += [f"{c.classname}::{c.name}: {c.message}" for c in failed[:20]]
    skipped = [c for c in cases if c.status is Status.SKIPPED]
    if skipped:
        problems.append(SKIPPED.format(count=len(skipped), first=f"{skipped[0].classname}::{skipped[0].name}: {skipped[0].message}"))
    if done.returncode != 0 and not problems:
        problems.append(f"pytest {' '.join(TEST_FOLDERS)} exited with status {done.returncode}")
    status = Status.PASSED if not problems else Status.FAILED
    summary = f"{sum(c.status is Status.PASSED for c in cases)}/{len(cases)} route tests passed"
    if (launcher_sha256(), route_tests_sha256(source)) != judged:
        problems.append(CHANGED_WHILE_RUNNING)
        status = Status.ERROR
    props = (("launcher_sha256", judged[0]), ("route_tests_sha256", judged[1]))
    return GateResult(GATE, status, summary, tuple(cases), tuple(problems), case_counts(cases), props, seconds=seconds)


def read_junit(path: Path) -> tuple[list[CaseResult], str | None]:
    """The cases of pytest's JUnit file, or none and why it cannot be read (cut short by a full disk, say)."""
    from xml.etree.ElementTree import ParseError

    try:
        return _junit_cases(path), None
    except (ParseError, OSError, ValueError) as exc:
        return [], JUNIT_UNREADABLE.format(junit=path, why=str(exc)[:120])


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
