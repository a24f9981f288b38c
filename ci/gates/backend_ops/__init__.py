"""The backend_ops gate: test-backend-ops on the profile's device, against the pin's case counts. Its name (one constant; a light module: resolving a job imports it, not the gate)."""

NAME = "backend_ops"
