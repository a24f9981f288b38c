"""Defaults that the command line and the stages share, each defined once. A light module: parsing the command
line imports it and nothing heavy."""

from __future__ import annotations

TIMEOUT = 600.0  # seconds per test-backend-ops run
REQUEST_TIMEOUT = 600.0  # seconds for one llama-server request (a long decode on a slow box)

# Largest baseline top-2 margin at which a correct build was measured to diverge with a drafter: 0.091 nats
# (H200, upstream build 11434; the others 0.051 and 0.0058; docs/equivalence.md). 0.1 is the round number above it.
NEAR_TIE = 0.1
TOKENS = 256  # compared per prompt by the equivalence gate
CONTEXT = 2048  # of the equivalence gate's servers

# what the engine's bench measured: a 1,838-token prompt (best / median of 5), 256 decode tokens (best of 3)
BENCH_PROMPT_TOKENS = 1800
BENCH_ROUNDS = 2
BENCH_PROMPT_REPS = 5
BENCH_DECODE_REPS = 3
BENCH_DECODE_TOKENS = 256
BENCH_WARMUP_TOKENS = 32  # an unmeasured decode on each fresh server first: one-time costs land before the samples
BENCH_CONTEXT = 4096
