"""The equivalence gate: greedy output with the drafter equals the output without it, and the drafter drafts. Its name (one constant; a light module: resolving a job imports it, not the gate)."""

NAME = "equivalence"
