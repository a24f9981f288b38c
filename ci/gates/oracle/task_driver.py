"""The KernelForge task's driver (``nox -s kernelforge`` writes it): the oracle's cases and judgement, run
standalone against a build of the fork, printing KernelForge's contract lines.

    python driver.py                 # correctness: a line per case, "SNR: <worst> dB", "allclose: <bool>"
    python driver.py --bench-mode    # "case_ms: <id> <median ms>" per timed case
    python driver.py --profile-run   # the engine's case once, for a profiler

Exit status: 0 when every case is finite and at or above the floor (allclose), 1 when not, 2 when the driver could
not compile or run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

if __package__:  # imported inside the project (its tests)
    from ci.gates.oracle import cases, reference, wire
else:  # python driver.py in a task folder: its own copies beside it, first (python -I leaves the folder off the path)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import cases  # type: ignore[no-redef,import-not-found]
    import reference  # type: ignore[no-redef,import-not-found]
    import wire  # type: ignore[no-redef,import-not-found]

HERE = Path(__file__).resolve().parent
TIMED = ("gdn-engine-k8", "gdn-decode-k1", "gdn-long-t2048")  # as the oracle gate times them (ci/gates/oracle/timing.py)
BENCH_RUNS = 9
LIBRARIES = ("ggml", "ggml-base")

# the contract's lines (KernelForge reads them)
CASE_LINE = "case: {id} SNR: {snr} dB (output {output}, slots {slots}) non-finite: {bad}"
WORST_LINE = "SNR: {snr} dB"
ALLCLOSE_LINE = "allclose: {ok}"
CASE_MS_LINE = "case_ms: {id} {ms:.4f}"
PROFILE_LINE = "profile_run: {id} done"


def shown(db: float) -> str:
    return "inf" if db == math.inf else "nan" if math.isnan(db) else f"{db:.1f}"


def library(folder: Path, name: str) -> Path:
    found = wire.library(folder, name)
    if found is None:
        raise SystemExit(f"driver.py: {folder}: no lib{name}.so; give --lib-dir the build's folder of ggml libraries")
    return found


def compile_driver(lib_dir: Path, include_dir: Path, work: Path) -> Path:
    executable = work / "oracle-driver"
    argv = wire.compile_argv(os.environ.get("CC", "cc"), include_dir, HERE / "driver.c", executable, [library(lib_dir, n) for n in LIBRARIES], lib_dir)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"driver.py: the driver did not compile against {include_dir}: {done.stderr.strip().splitlines()[-1:]}")
    return executable


def run_case(executable: Path, device: str, case: cases.Case, inputs: cases.Inputs, work: Path, bench: int = 0) -> tuple[np.ndarray, np.ndarray, list[float]]:
    given, result = work / f"{case.id}.in", work / f"{case.id}.out"
    given.write_bytes(wire.encode(case.shape, inputs))
    argv = [str(executable), "--threads", str(os.cpu_count() or 1 if device.upper() == "CPU" else 0)]
    argv += ["--bench-mode", str(bench)] if bench else []
    done = subprocess.run([*argv, device, case.id, str(given), str(result)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"driver.py: {case.id}: the driver exited {done.returncode}: {done.stdout.strip()[-300:]}")
    samples = [float(line.split()[2]) for line in done.stdout.splitlines() if line.startswith("sample_ms: ")]
    output, slots = wire.split(case.shape, np.fromfile(result, dtype="<f4"))
    return output, slots, samples


def main(argv: Sequence[str] | None = None) -> int:
    task = json.loads((HERE / "task.json").read_text(encoding="utf-8")) if (HERE / "task.json").is_file() else {}
    p = argparse.ArgumentParser(prog="driver.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib-dir", default=task.get("lib_dir"), help="the build's folder of libggml*.so (default: task.json's)")
    p.add_argument("--include-dir", default=task.get("include_dir"), help="the fork's ggml/include (default: task.json's)")
    p.add_argument("--device", default=task.get("device", "CPU"), help="as test-backend-ops' -b names it (default: task.json's)")
    p.add_argument("--floor", type=float, default=float(task.get("floor_db", 100.0)), help="the SNR floor in dB for allclose (default: task.json's)")
    p.add_argument("--bench-mode", action="store_true", help="time the timed cases: case_ms lines")
    p.add_argument("--profile-run", action="store_true", help="run the engine's case once, for a profiler")
    p.add_argument("--cases", default="", help="'all', or case ids joined by commas (default: every case; --bench-mode: the timed ones)")
    args = p.parse_args(argv)
    if not args.lib_dir or not args.include_dir:
        p.error("no build: give --lib-dir and --include-dir (nox -s kernelforge records them in task.json)")
    chosen = list(cases.CASES)
    if args.cases and args.cases != "all":
        wanted = set(args.cases.split(","))
        chosen = [c for c in chosen if c.id in wanted]
    elif args.bench_mode and not args.cases:
        chosen = [c for c in chosen if c.id in TIMED]
    elif args.profile_run:
        chosen = [c for c in chosen if c.id == "gdn-engine-k8"]
    with tempfile.TemporaryDirectory(prefix="kernelforge-") as folder:
        work = Path(folder)
        executable = compile_driver(Path(args.lib_dir), Path(args.include_dir), work)
        worst, ok = math.inf, True
        for case in chosen:
            inputs = cases.draw(case)
            output, slots, samples = run_case(executable, args.device, case, inputs, work, BENCH_RUNS if args.bench_mode else 0)
            if args.profile_run:
                print(PROFILE_LINE.format(id=case.id))
                continue
            if args.bench_mode:
                print(CASE_MS_LINE.format(id=case.id, ms=statistics.median(samples)), flush=True)
                continue
            truth = reference.gated_delta_net(inputs.q, inputs.k, inputs.v, inputs.g, inputs.beta, inputs.state, case.shape.snapshots)
            bad = int(np.count_nonzero(~np.isfinite(output)) + np.count_nonzero(~np.isfinite(slots)))
            with np.errstate(invalid="ignore", over="ignore"):
                out_db = reference.snr_db(output, truth.output)
                slot_db = min((reference.snr_db(slots[s], truth.slots[s]) for s in range(slots.shape[0])), default=math.inf)
            snr = -math.inf if bad else min(out_db, slot_db)
            worst = min(worst, snr)
            ok = ok and not bad and snr >= args.floor
            print(CASE_LINE.format(id=case.id, snr=shown(snr), output=shown(out_db), slots=shown(slot_db), bad=bad), flush=True)
        if not (args.bench_mode or args.profile_run):
            print(WORST_LINE.format(snr=shown(worst)))
            print(ALLCLOSE_LINE.format(ok=ok))
            return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
