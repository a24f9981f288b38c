"""The archs gate: the fork's whole-model test, test-llama-archs, per architecture. Its name (one constant; a light module: resolving a job imports it, not the gate)."""

NAME = "archs"
