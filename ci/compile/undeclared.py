"""A ``-D`` the project never declared, found in CMakeCache.txt after the configure.

CMake's "Manually-specified variables were not used" warning misses every ``GGML_*`` flag: ggml's CMakeLists.txt
reads all variables (``get_cmake_property(all_variables VARIABLES)``, to write them into ggml-config.cmake), so a
misspelled ``-DGGML_...`` configures silently. A variable that no ``option()`` or cache ``set()`` declared keeps the
type CMake gives a command-line value without one: ``NAME:UNINITIALIZED=VALUE``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ci.pin.pins import cmake_flag_name
from ci.schema import did_you_mean

CACHE_LINE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.+-]*):([A-Z]+)=", re.MULTILINE)
DECLARED_TYPES = ("BOOL", "STRING", "PATH", "FILEPATH")  # what option() and set(... CACHE TYPE) give
# read as plain variables, never declared: ggml-hip forwards them to CMAKE_HIP_ARCHITECTURES (ggml/src/ggml-hip/
# CMakeLists.txt lines 35-40 at ROCmFPX c14872f); the HIP profiles pass GPU_TARGETS and the cache keeps it UNINITIALIZED
READ_UNDECLARED = ("GPU_TARGETS", "AMDGPU_TARGETS")

# Messages, shared with the tests that match on them (tests/support/messages.py)
UNDECLARED = "{flag}: the project declares no {name}{suggestion}"


def cache_types(cache_text: str) -> dict[str, str]:
    """Each cache entry's type, from CMakeCache.txt's ``NAME:TYPE=VALUE`` lines."""
    return {m.group(1): m.group(2) for m in CACHE_LINE_RE.finditer(cache_text)}


def undeclared(cache_text: str, flags: Iterable[str]) -> list[str]:
    """Our ``-D`` flags whose variable the project never declared, each with the closest declared one.

    ``CMAKE_*`` variables are CMake's own: several (``CMAKE_C_COMPILER_LAUNCHER``) are read without ever being
    declared, and CMake's unused-variable warning already covers them (ci/compile/cmake.py ``ignored_flags``).
    """
    types = cache_types(cache_text)
    declared = sorted(n for n, t in types.items() if t in DECLARED_TYPES and not n.startswith("CMAKE_"))
    out: list[str] = []
    for flag in flags:
        name = cmake_flag_name(flag)
        if name.startswith("CMAKE_") or name in READ_UNDECLARED or types.get(name) != "UNINITIALIZED":
            continue
        prefix = name.split("_", 1)[0] + "_"
        near = [n for n in declared if n.startswith(prefix)] or declared
        out.append(UNDECLARED.format(flag=flag, name=name, suggestion=did_you_mean(name, near)))
    return out


def check_cache(build_dir: Path, flags: Iterable[str]) -> list[str]:
    cache = build_dir / "CMakeCache.txt"
    if not cache.is_file():
        return []
    return undeclared(cache.read_text(encoding="utf-8", errors="replace"), flags)
