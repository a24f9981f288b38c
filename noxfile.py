"""onebit-ci sessions: a table of contents. Each session installs the project once and calls ``python -m ci``.

``nox -l`` lists them; ``nox -s NAME -- --help`` shows a session's flags.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["main_job"]

ROOT = Path(__file__).parent

# nox's own process holds the ledger's key in its environment too: not dumpable, no other process of this user reads
# it through /proc/<pid>/environ (ci.command.hide_secrets does the same for python -m ci; docs/release.md)
if sys.platform.startswith("linux") and (os.environ.get("ONEBIT_LEDGER_KEY") or os.environ.get("ONEBIT_LEDGER_WITNESS")):
    import ctypes

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def _compile_jobs() -> int:
    """Compile jobs for the slow tier's first install: one per core, and no more than one per 2 GiB of memory, so
    that a small CI machine does not swap while it compiles llama.cpp."""
    try:
        gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        gib = 4.0
    return max(1, min(os.cpu_count() or 1, int(gib // 2)))


# CPU llama.cpp for the slow tier; examples off: 423 s instead of 590 s on 2 cores (../shared facts, measured).
NO_KEY = {"ONEBIT_LEDGER_KEY": "", "ONEBIT_LEDGER_WITNESS": ""}  # empty: unset, for ci (docs/release.md)
BINARIES_ENV = {"CMAKE_ARGS": "-DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF", "CMAKE_BUILD_PARALLEL_LEVEL": str(_compile_jobs())}


def _install(session: nox.Session, *extras: str) -> None:
    """Install the project (editable) only when pyproject.toml or the extras changed since the last install.

    With ``--no-venv`` (a box where nothing can be installed) the running Python and its packages are used.
    """
    if session.venv_backend == "none":
        return
    venv = Path(str(session.virtualenv.location))
    spec = f".[{','.join(extras)}]" if extras else "."
    stamp = venv / ".onebit-installed"
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + spec.encode()).hexdigest()
    if stamp.is_file() and stamp.read_text() == want:
        return
    # pip and the builds it runs never hold the ledger's key: they are dumpable, for seconds, as any program it starts
    session.install("-e", spec, env={**NO_KEY, **(BINARIES_ENV if "binaries" in extras else {})})
    stamp.write_text(want)


# Python 3.11+ (a session's venv has nox's Python): ci.gates.serving.launcher.safe_path does the same for the launcher
_SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()



def _ci(session: nox.Session, command: str) -> None:
    # a bytecode folder made for this run: what ci imports before it can look (ci/cli.py) is never the tree's .pyc
    with tempfile.TemporaryDirectory(prefix="onebit-bytecode-") as bytecode:
        env = {"PYTHONPYCACHEPREFIX": bytecode}
        if session.venv_backend == "none":  # the running Python, which may find ci only in the working directory
            session.run(sys.executable, "-m", "ci", command, *session.posargs, env=env, external=True)
        else:  # installed: -P leaves the working directory off sys.path (a json.py planted there ran inside ci)
            session.run("python", *_SAFE_PATH, "-m", "ci", command, *session.posargs, env=env)


@nox.session
def main_job(session: nox.Session) -> None:
    """The default: verify the pin; then build, run every gate ship requires, and ship, where the profile's toolchain is."""
    _install(session, "ship", "plot")
    _ci(session, "main-job")


@nox.session(default=False)
def verify_pin(session: nox.Session) -> None:
    """Check that pins.yaml, .gitmodules, the gitlink and the checkout agree."""
    _install(session)
    _ci(session, "verify-pin")


@nox.session(default=False)
def bump_pin(session: nox.Session) -> None:
    """Move the pin: nox -s bump_pin -- SHA|head [--remote URL|PATH] [--branch B] [--allow-rollback]."""
    _install(session)
    _ci(session, "bump-pin")


@nox.session(default=False)
def build(session: nox.Session) -> None:
    """Check out the pin, apply the patches, configure and compile: -- --profile gfx1151|gfx1100|gfx1201|cuda|vulkan|cpu."""
    _install(session)
    _ci(session, "build")


@nox.session(default=False)
def gpu_tests(session: nox.Session) -> None:
    """Every gate ship requires (the registry, ci/gates/registry.py) on the current build: -- --profile P [--gate G]."""
    _install(session, "plot")  # the perf gate's chart
    _ci(session, "gpu-tests")


@nox.session(default=False)
def gate_selftest(session: nox.Session) -> None:
    """Plant known faults in a copy of the pinned fork and expect each gate to catch its own: -- --profile P."""
    _install(session)
    _ci(session, "gate-selftest")


@nox.session(default=False)
def bisect(session: nox.Session) -> None:
    """Name the fork commit that broke a gate: -- [--good A] [--bad B] [--gate G] [--profile P] [--max-steps N] [--check-good]."""
    _install(session, "plot")  # the perf gate's chart, for --gate perf
    _ci(session, "bisect")


@nox.session(default=False)
def ship(session: nox.Session) -> None:
    """Build the serve launcher's wheel and sdist when every gate passed for exactly this build: -- --profile P."""
    _install(session, "ship")  # python -m build and setuptools, for the wheel and the sdist
    _ci(session, "ship")


@nox.session(default=False)
def patches(session: nox.Session) -> None:
    """Bring the checkout to the pin + series (fetching first); -- --check only says what would apply, --reset discards hand edits."""
    _install(session)
    _ci(session, "patches")


@nox.session(default=False)
def export_patches(session: nox.Session) -> None:
    """Write patches/ back from a local branch of the checkout: -- --branch B."""
    _install(session)
    _ci(session, "export-patches")


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """A/B-measure serve configs: nox -s bench -- -m M --config base= --config dflash="--dflash D" [--rounds N] [--lock P] [--json OUT]."""
    _install(session, "plot")  # the chart beside the JSON
    _ci(session, "bench")


@nox.session(default=False)
def tests(session: nox.Session) -> None:
    """Run the whole test suite, the slow tier with real CPU llama.cpp binaries included."""
    _install(session, "binaries", "test")
    session.run("pytest", *session.posargs)


@nox.session(default=False)
def kernelforge(session: nox.Session) -> None:
    """Write the seed's KernelForge task for the delta-net kernel from the pin: -- --out DIR [--profile P]."""
    _install(session)
    _ci(session, "kernelforge")


@nox.session(default=False)
def lint(session: nox.Session) -> None:
    """ruff and mypy --strict over ci/, serve/, tests/ and this file."""
    _install(session, "lint")
    session.run("ruff", "check", ".")
    session.run("mypy")


@nox.session(default=False)
def route_tests(session: nox.Session) -> None:
    """The no-GPU route tests of the serve launcher (hadamard_route, recipes_route)."""
    _install(session)
    session.run("pytest", "tests/route", "tests/serve", *session.posargs)


@nox.session(default=False)
def equivalence(session: nox.Session) -> None:
    """Greedy equivalence: nox -s equivalence -- --model M --drafter D [--llama-server PATH] [--spec-type T]."""
    _install(session)
    _ci(session, "equivalence")
