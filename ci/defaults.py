"""Defaults that the command line and the stages share, each defined once. A light module: parsing the command
line imports it and nothing heavy."""

from __future__ import annotations

TIMEOUT = 600.0  # seconds per test-backend-ops run
REQUEST_TIMEOUT = 600.0  # seconds for one llama-server request (a long decode on a slow box)
# the drafter leg's request of the tiny generated models (256 tokens; the equivalence gate's engine path) is given up
# on after this, or 20 times the baseline's time for it when that is longer (equivalence.HANG_FACTOR): a request takes
# 0.1-1 s on 2 idle CPU cores, while a planted fault (spec-accept-draft-token on the qwen35 near leg) kept the drafter
# server busy with no answer for the full REQUEST_TIMEOUT
TINY_HANG_AFTER = 120.0
# gate_selftest: one fault's rebuild and gates. The longest judged run was 52.1 s on the H200, three faults 89.6 s
# on 2 CPU cores (docs/gates.md); spec-accept-draft-token on the qwen35 legs was still going after 6 minutes on Vulkan.
FAULT_TIMEOUT = 1200.0

# Largest baseline top-2 margin at which a correct build was measured to diverge with a drafter: 0.091 nats
# (H200, upstream build 11434; the others 0.051 and 0.0058; docs/equivalence.md). 0.1 is the round number above it.
NEAR_TIE = 0.1
TOKENS = 256  # compared per prompt by the equivalence gate
CONTEXT = 2048  # of the equivalence gate's servers
# The evidence a drafter leg must give (pins.yaml equivalence.floors): drafted tokens the target accepted and rejected
# on each prompt, and the run's acceptance. The near drafter drafted 1739 and had 965 accepted over three 256-token
# prompts on the H200 (55.5%), 46-48% on the CPU: hundreds either way per prompt. A drafter of another seed had
# 11 of 5924 accepted (0.2%) and passed the gate before these floors (issue 20).
FLOOR_ACCEPTED = 16
FLOOR_REJECTED = 8
FLOOR_ACCEPTANCE = 0.1

# what the engine's bench measured: a 1,838-token prompt (best / median of 5), 256 decode tokens (best of 3)
BENCH_PROMPT_TOKENS = 1800
BENCH_ROUNDS = 2
# the perf gate's rounds before its first look: the fewest whose order-statistic interval of the median reaches 95%
# (ci/gates/perf/judge.py), so no verdict comes from fewer and a record of fewer does not count for ship
# (ci/release/binding.py; 1 round gave an interval of width 0, never inconclusive)
PERF_ROUNDS = 6
# the perf gate's budget: it adds rounds until every check is settled or one of these runs out (docs/bench.md, "How
# many rounds": on 2 shared cores a round took 1.1-12 s; at 30 rounds a check settles unless a fifth of its rounds
# or more fall on the wrong side of its floor)
PERF_MAX_ROUNDS = 30
PERF_SECONDS = 600.0
BENCH_PROMPT_REPS = 5
BENCH_DECODE_REPS = 3
BENCH_DECODE_TOKENS = 256
BENCH_WARMUP_TOKENS = 32  # an unmeasured decode on each fresh server first: one-time costs land before the samples
BENCH_CONTEXT = 4096
ARCHS = ("qwen35", "qwen35moe", "qwen3next", "llama")  # the archs gate: the engine's class, and llama as a control
