"""The oracle gate: the fork's own GATED_DELTA_NET on the profile's device against a float64 reference of its definition. Its name (one constant; a light module)."""

NAME = "oracle"
