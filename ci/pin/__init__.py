"""Stage 1, the pin: pins.yaml, the project's .gitmodules and gitlink, verify_pin, and bump_pin."""
