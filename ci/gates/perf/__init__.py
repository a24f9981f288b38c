"""The perf gate: the seeds' performance claims as ratios measured in one run. Its name (one constant; a light module: resolving a job imports it, not the gate)."""

NAME = "perf"
