"""onebit-ci: build-and-test orchestration for the pinned ROCmFPX fork of llama.cpp."""
