"""The seed's KernelForge task, written from the pin (``nox -s kernelforge -- --out DIR``): the pinned delta-net kernel
as the checkout holds it (pin + series), the oracle's own cases, float64 reference and driver, a standalone
``driver.py``, ``program.md`` and ``run.sh`` (docs/gates.md). Nothing is a hand copy: each file is read from the
checkout or this package when the task is written, and task.json names the pin, the series and each file's sha256.

Plan apart from run: :func:`plan` reads the files and returns what to write; :func:`write` writes it whole or not at
all.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ci.errors import ConfigError

HERE = Path(__file__).resolve().parent
# the kernel a campaign works on: the fork's CUDA source, which HIP compiles for gfx1151 (ggml-hip builds ggml-cuda's files)
KERNEL = ("ggml/src/ggml-cuda/gated_delta_net.cu", "ggml/src/ggml-cuda/gated_delta_net.cuh")
# the CPU op, the definition the reference follows (read, never edited by a campaign)
DEFINITION = "ggml/src/ggml-cpu/ops.cpp"
ORACLE = {"cases.py": "cases.py", "reference.py": "reference.py", "wire.py": "wire.py", "driver.c": "driver.c", "task_driver.py": "driver.py"}
TASK = "task.json"

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_A_TASK = "--out {out}: holds files and no {task}: give an empty or new folder (or an earlier task's, which is replaced)"
NO_KERNEL = "{path}: not in the checkout: the pin has no {file}; the task packages the fork's own kernel"
WROTE = "kernelforge: wrote {out}: {files} files, the kernel of pin {pin} (series {series}); next: {out}/run.sh"

PROGRAM = """# The gated delta-net kernel of {reference} ({pin}), for a KernelForge campaign on gfx1151

## The task
Make `kernel/gated_delta_net.cu` faster on AMD Strix Halo (gfx1151) without changing what it computes.
`python driver.py` is the truth: every case of the oracle gate ({cases} cases: the engine's layer, head size 128 with
48 value heads over 16 q/k heads and a 512-token micro-batch, K = 1 and K = 8; every test-backend-ops shape; decode;
2048 tokens; hard inputs, log-gates in [-20, 0), gates at 1, beta at 0 and 1, a large and a zero state) against a
float64 reference of the op's definition ({definition}). It prints an SNR per case, `SNR: <worst> dB` and
`allclose: <bool>` (every value finite, every case at or above {floor:g} dB). `python driver.py --bench-mode` prints
`case_ms: <id> <median ms>` for the timed cases; `--profile-run` runs the engine's case once under a profiler.

## What differs on gfx1151
- Wave32: a wavefront is 32 lanes (RDNA 3.5), not CDNA's 64; a reduction or a shuffle written for 64 lanes reads
  lanes that are not there. HIP's `warpSize` is 32 here.
- WMMA, not MFMA: matrix cores are reached through `__builtin_amdgcn_wmma_*` (16x16x16 f16/bf16 tiles) or rocWMMA;
  there are no MFMA instructions and no MFMA counters to profile.
- Memory: LPDDR5X shared with the CPU (unified, about 256 GB/s); the 512-token prefill is bandwidth-bound before it
  is compute-bound.
- Hard gates: a kernel that factors the decay (exp(G_t) / exp(G_s) over a chunk) underflows to 0/0 with log-gates
  near -20; the engine's campaign of 2026-09-29 kept such a change once (about 1.1 million non-finite values). The
  hard cases are here for that: a NaN fails whatever the SNR elsewhere.

## How a kept change comes back
1. Export it as a patch of the series (docs/patches.md): commit the kernel in the fork's checkout and
   `nox -s export_patches -- --branch B`, with its `Upstream:` and `Drop-when:` trailers.
2. `nox -s build -- --profile gfx1151`, then on a gfx1151 machine `nox -s gpu_tests -- --profile gfx1151`: the oracle
   gate judges it against the same truth, and backend_ops, equivalence and archs judge the rest. Ship counts nothing
   else.

## Running it
`run.sh [driver.py options]` copies `kernel/` into the checkout task.json names, rebuilds the build's ggml there
(`cmake --build BUILD --target ggml`), then runs `driver.py`. Point task.json's `checkout` and `build` at a scratch
copy (`cp -a`) for a campaign: run.sh writes into the checkout it names.
A campaign needs KernelForge itself and a logged-in agent CLI, which this project does not provide.
"""

RUN_SH = """#!/usr/bin/env bash
# KernelForge's entry point: the candidate kernel into the checkout task.json names, that build's ggml rebuilt, then
# the driver (its arguments passed on). Point task.json at a scratch copy of the checkout and build for a campaign.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
field() {{ python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$here/task.json" "$1"; }}
checkout=$(field checkout)
build=$(field build)
{copies}
cmake --build "$build" --target ggml
exec python3 "$here/driver.py" "$@"
"""


@dataclass(frozen=True)
class TaskPlan:
    out: Path
    files: tuple[tuple[str, bytes, bool], ...]  # (path in the task, content, executable)
    pin: str
    series: str


def plan(out: Path, checkout: Path, build_dir: Path, device: str, pin: str, reference: str, series: str, floor: float) -> TaskPlan:
    """The task's files for the checkout at ``pin`` (+ the series ``series``) and the build in ``build_dir``."""
    from ci.gates.oracle.cases import CASES

    files: list[tuple[str, bytes, bool]] = []
    for rel in KERNEL:
        path = checkout / rel
        if not path.is_file():
            raise ConfigError(NO_KERNEL.format(path=path, file=rel))
        files.append((f"kernel/{Path(rel).name}", path.read_bytes(), False))
    for source, name in ORACLE.items():
        files.append((name, (HERE / source).read_bytes(), False))
    digests = {name: hashlib.sha256(content).hexdigest() for name, content, _ in files}
    task = {
        "pin": pin,
        "reference": reference,
        "series": series,
        "checkout": str(checkout.resolve()),
        "build": str(build_dir.resolve()),
        "lib_dir": str((build_dir / "bin").resolve()),
        "include_dir": str((checkout / "ggml" / "include").resolve()),
        "device": device,
        "floor_db": floor,
        "kernel": {f"kernel/{Path(rel).name}": rel for rel in KERNEL},
        "sha256": digests,
    }
    copies = "\n".join(f'cp "$here/kernel/{Path(rel).name}" "$checkout/{rel}"' for rel in KERNEL)
    files += [
        (TASK, (json.dumps(task, indent=2) + "\n").encode(), False),
        ("program.md", PROGRAM.format(reference=reference, pin=pin[:12], cases=len(CASES), definition=DEFINITION, floor=floor).encode(), False),
        ("run.sh", RUN_SH.format(copies=copies).encode(), True),
    ]
    return TaskPlan(out, tuple(files), pin, series)


def write(task: TaskPlan) -> Path:
    """The task in ``task.out``, whole: written in a fresh folder beside it, then renamed over it. ``out`` may be new,
    empty, or an earlier task (its task.json there); anything else is refused before a byte is written."""
    out = task.out
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ConfigError(NOT_A_TASK.format(out=out, task=TASK))
    if out.is_dir() and any(out.iterdir()) and not (out / TASK).is_file():
        raise ConfigError(NOT_A_TASK.format(out=out, task=TASK))
    out.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name, content, executable in task.files:
            path = fresh / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            if executable:
                path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        if out.is_dir():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(fresh, out)
            shutil.rmtree(old)
        else:
            os.replace(fresh, out)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return out
