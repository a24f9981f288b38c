"""The benchmarks' own inputs: a count below 1 or a llama-server that is not there is one line before anything runs,
never a traceback (``statistics.median`` of no rounds, a server that exits before it is healthy)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
# every benchmark's count flags, read from its source: a new one is checked without editing this file
COUNT_FLAG = re.compile(r'add_argument\("(--[a-z-]+)", type=(\w+)')
SCRIPTS = {s.name: s.read_text(encoding="utf-8") for s in sorted(BENCHMARKS.glob("*.py")) if s.name != "common.py"}
SHARED = "profile_options("  # common.profile_options gives a benchmark --profile, --llama-server and --rounds
COUNTS = sorted(
    {(name, flag) for name, text in SCRIPTS.items() for flag, kind in COUNT_FLAG.findall(text) if kind in ("int", "at_least_one")}
    | {(name, "--rounds") for name, text in SCRIPTS.items() if SHARED in text}
)
SERVER_TAKERS = sorted(name for name, text in SCRIPTS.items() if '"--llama-server"' in text or SHARED in text)


def bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_every_benchmark_count_is_found() -> None:
    assert len(COUNTS) >= 10, COUNTS  # the pattern still reads the sources
    assert len(SERVER_TAKERS) >= 5, SERVER_TAKERS


@pytest.mark.parametrize(("script", "flag"), COUNTS)
@pytest.mark.parametrize("value", ["0", "many"])
def test_a_count_below_one_is_refused_by_name(script: str, flag: str, value: str) -> None:
    done = bench(script, f"{flag}={value}")
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stdout + done.stderr
    assert f"argument {flag}: " in done.stderr.strip().splitlines()[-1], done.stderr


@pytest.mark.parametrize(
    ("script", "flag", "value"),
    [
        ("log_judging.py", "--mb", "-5"),  # before: "-5 MB ... target < 10 s: OK", exit 0
        ("log_judging.py", "--mb", "nan"),
        ("near_drafter.py", "--perturb", "-1"),  # before: numpy's "scale < 0" traceback
        ("near_drafter.py", "--perturb", "nan"),
        ("perf_rounds.py", "--margins", "nan"),  # before: "against the floor nan", exit 0
        ("shared_baseline.py", "--device", "bogus"),  # before: eight lines of a server's exit status
    ],
)
def test_a_number_or_device_that_cannot_be_right_is_refused_by_name(script: str, flag: str, value: str) -> None:
    done = bench(script, flag, value)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stdout + done.stderr
    assert f"argument {flag}: " in done.stderr.strip().splitlines()[-1], done.stderr


@pytest.mark.parametrize("script", SERVER_TAKERS)
def test_a_llama_server_that_is_not_there_is_one_line(script: str, tmp_path: Path) -> None:
    missing = tmp_path / "no-llama-server"
    done = bench(script, "--llama-server", str(missing))
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [f"benchmark: --llama-server {missing}: no such file; give a build's bin/llama-server"]


@pytest.mark.parametrize("script", ["engine_path_cost.py", "archs_together.py"])
def test_a_benchmark_of_archs_names_an_unknown_profile_and_a_missing_test_llama_archs(script: str, tmp_path: Path) -> None:
    server = tmp_path / "bin" / "llama-server"
    server.parent.mkdir()
    server.write_text("")  # only looked at, never run: test-llama-archs is missing beside it
    unknown = bench(script, "--profile", "cdua", "--llama-server", str(server))
    lonely = bench(script, "--llama-server", str(server))
    for done in (unknown, lonely):
        assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert unknown.stderr.startswith("benchmark: --profile cdua: unknown profile (did you mean \"cuda\"?)"), unknown.stderr
    assert lonely.stderr.strip() == f"benchmark: {server.parent / 'test-llama-archs'}: no test-llama-archs beside the llama-server; build it (pins.yaml build.targets)"
