"""What the backend_ops tests share: the captures in ``data/`` and the pins they were made at."""

from __future__ import annotations

from pathlib import Path

from ci.gates.backend_ops.output import ConsoleReport, SqlReport, parse_console, parse_sql

DATA = Path(__file__).resolve().parents[1] / "backend_ops" / "data"

# ciru-ai/ROCmFPX main, the commit of the sql capture (its build_commit is c14872f-dirty)
CAPTURE_COMMIT = "c14872f8407f5b0642f3c395439b929021df753a"
# the engine's pin in pins.yaml
ENGINE_PIN = "8abd563db5a3666adbd6eaa50c6826dfbe9abfef"
OP = "GATED_DELTA_NET"
UPSTREAM_CASES = 36  # upstream llama.cpp build 11434 and the ciru-ai fork both print 36 GATED_DELTA_NET cases


def text(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def console(name: str) -> ConsoleReport:
    return parse_console(text(name))


def sql(name: str) -> SqlReport:
    return parse_sql(text(name))
