"""Logs derived from the real captures in ``data/``, the way test-backend-ops would print them.

``python -m tests.support.derive`` writes them into ``data/``; ``test_derived_logs_are_current`` checks that
the committed files are what these functions make, so a derived log never drifts from its recipe.
The recipes follow upstream's console printer (``tests/test-backend-ops.cpp``): a failure's message is printed
before the case on its line; ``N/M tests passed``, a blank line, ``Failing tests:`` and the names, ``Backend NAME:
FAIL``; a skipped device counts as a passed backend; stdout is flushed after each ``  OP(params): `` only, so a
process that dies loses the status of the last case it printed, and stderr lands right after that ``: ``.
"""

from __future__ import annotations

import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "backend_ops" / "data"

GREEN_OK = "\x1b[1;32mOK\x1b[0m"
RED_FAIL = "\x1b[1;31mFAIL\x1b[0m"
CASE_OK = re.compile(r"^(  GATED_DELTA_NET\(.*\): )\x1b\[1;32mOK\x1b\[0m$")

# what a comparison prints, in upstream's formats ("[%s] ERR = %.9f > %.9f ", "[%s] NaN at index %zu (%s=%f %s=%f) ",
# "[%s] inf mismatch: %s=%f %s=%f "); the numbers are made up
ERR = "[GATED_DELTA_NET] ERR = 0.012300000 > 0.000500000 "
NAN = "[GATED_DELTA_NET] NaN at index 17 (CUDA0=nan CPU=0.318254) "
INF = "[GATED_DELTA_NET] inf mismatch: CUDA0=inf CPU=1.250000 "
CPU_ERR = "[GATED_DELTA_NET] ERR = 0.000203100 > 0.000000100 "
# a made-up abort as GGML_ABORT prints it ("%s:%d: %s"), the file relative as in a release build
ABORT_LINE = "ggml/src/ggml-cuda/ggml-cuda.cu:98: CUDA error"


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def _case_lines(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if CASE_OK.match(line)]


def _name(line: str) -> str:
    m = CASE_OK.match(line)
    assert m is not None
    return m.group(1).strip().removesuffix(":")


def with_failures(text: str, failures: dict[int, str], device: str, backends: tuple[int, int]) -> str:
    """``text`` with the cases at the given positions (0-based among the cases) failed with the given messages."""
    lines = text.split("\n")
    cases = _case_lines(lines)
    names = []
    for position, message in failures.items():
        i = cases[position]
        names.append(_name(lines[i]))
        lines[i] = message + CASE_OK.sub(lambda m: m.group(1) + RED_FAIL, lines[i])
    total = len(cases)
    summary = lines.index(f"  {total}/{total} tests passed")
    lines[summary] = f"  {total - len(failures)}/{total} tests passed"
    lines[summary + 1 : summary + 2] = ["", "Failing tests:", *(f"  {n}" for n in names), f"  Backend {device}: {RED_FAIL}"]
    end = lines.index(next(line for line in lines if line.endswith("backends passed")))
    lines[end] = f"{backends[0]}/{backends[1]} backends passed"
    lines[end + 1] = RED_FAIL
    return "\n".join(lines)


def cut_after(text: str, position: int, last_words: str) -> str:
    """Output of a run that died while the case after ``position`` ran: that case never printed, and the status
    of the case at ``position`` was still in stdout's buffer; what the process said on stderr follows its ``: ``.
    """
    lines = text.split("\n")
    i = _case_lines(lines)[position]
    m = CASE_OK.match(lines[i])
    assert m is not None
    head = lines[:i]
    return "\n".join([*head, m.group(1) + last_words]) + ("\n" if last_words else "")


def interleaved(text: str) -> str:
    """The capture as a pipe delivers it: a stderr line that came while a case's OK was still buffered lands
    right after that case's ``: ``, and the OK follows on its own line.
    """
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = CASE_OK.match(line)
        noise = []
        j = i + 1
        while j < len(lines) and lines[j].startswith("ggml_backend_cuda_graph_compute:"):
            noise.append(lines[j])
            j += 1
        if m and noise:
            out.append(m.group(1) + noise[0])
            out.extend(noise[1:])
            out.append(GREEN_OK)
            i = j
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def with_unsupported(text: str, positions: list[int], device: str) -> str:
    """The cases at ``positions`` not supported by ``device``: they do not count in ``N/M tests passed``."""
    lines = text.split("\n")
    cases = _case_lines(lines)
    for position in positions:
        i = cases[position]
        lines[i] = CASE_OK.sub(lambda m: m.group(1) + f"not supported [{device}] ", lines[i])
    total = len(cases)
    summary = lines.index(f"  {total}/{total} tests passed")
    lines[summary] = f"  {total - len(positions)}/{total - len(positions)} tests passed"
    return "\n".join(lines)


def allocation_failure(text: str, position: int, device: str, backends: tuple[int, int]) -> str:
    """The case at ``position`` could not allocate its tensors: upstream prints ``failed to allocate tensors [%s] ``
    and no case line for it, so the message lands before the next case; the name is in ``Failing tests:``.
    """
    lines = text.split("\n")
    cases = _case_lines(lines)
    name = _name(lines[cases[position]])
    lines[cases[position + 1]] = f"failed to allocate tensors [{device}] " + lines[cases[position + 1]]
    del lines[cases[position]]
    total = len(cases)
    summary = lines.index(f"  {total}/{total} tests passed")
    lines[summary] = f"  {total - 1}/{total} tests passed"
    lines[summary + 1 : summary + 2] = ["", "Failing tests:", f"  {name}", f"  Backend {device}: {RED_FAIL}"]
    end = lines.index(next(line for line in lines if line.endswith("backends passed")))
    lines[end] = f"{backends[0]}/{backends[1]} backends passed"
    lines[end + 1] = RED_FAIL
    return "\n".join(lines)


def every_device_skipped(text: str) -> str:
    """The H200 run given ``-b ROCm0``: test-backend-ops skips both devices, counts them as passed, says OK."""
    lines = text.split("\n")
    head = lines[: lines.index("Testing 2 devices")]
    return "\n".join([*head, "Testing 2 devices", "", "Backend 1/2: CUDA0", "  Skipping", "Backend 2/2: CPU", "  Skipping", "2/2 backends passed", GREEN_OK, ""])


def derived() -> dict[str, str]:
    h200 = read("h200-cuda0.console.txt")
    cpu = read("cpu.console.txt")
    return {
        "h200-cuda0-fail.console.txt": with_failures(h200, {4: ERR, 11: NAN, 19: INF}, "CUDA0", (1, 2)),
        "cpu-fail.console.txt": with_failures(cpu, {7: CPU_ERR}, "CPU", (0, 1)),
        "h200-cuda0-abort.console.txt": cut_after(h200, 12, ABORT_LINE),
        "h200-cuda0-cut.console.txt": cut_after(h200, 20, ""),
        "h200-cuda0-interleaved.console.txt": interleaved(h200),
        "h200-rocm0-skipped.console.txt": every_device_skipped(h200),
        "h200-cuda0-unsupported.console.txt": with_unsupported(h200, [0, 30], "CUDA0"),
        "h200-cuda0-alloc.console.txt": allocation_failure(h200, 2, "CUDA0", (1, 2)),
    }


def main() -> None:
    for name, text in derived().items():
        (DATA / name).write_text(text, encoding="utf-8")
        print(f"wrote {name}")


if __name__ == "__main__":
    main()
