"""The route gate: the serve launcher's no-GPU tests. Its name (one constant; a light module: resolving a job imports it, not the gate)."""

NAME = "route"
