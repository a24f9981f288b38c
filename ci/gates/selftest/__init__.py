"""The self-test: planted faults, each caught by its own gate. Its name (one constant; a light module: resolving a job imports it, not the gate)."""

NAME = "gate_selftest"
