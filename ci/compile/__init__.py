"""Stage 3, the build: profiles, the toolchain, the flags, the build key and manifest, CMake."""
