"""Stage 4, the gates: each judges the current build (route, test-backend-ops, greedy equivalence) into a
GateResult; the registry runs them and writes each record in one place."""
