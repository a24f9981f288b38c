"""A ``-D`` the project never declared, found in CMakeCache.txt after the configure.

CMake's "Manually-specified variables were not used" warning misses every ``GGML_*`` flag: ggml's CMakeLists.txt
reads all variables (``get_cmake_property(all_variables VARIABLES)``, to write them into ggml-config.cmake), so a
misspelled ``-DGGML_...`` configures silently. A variable that no ``option()`` or cache ``set()`` declared keeps the
type CMake gives a command-line value without one: ``NAME:UNINITIALIZED=VALUE``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path

from ci.pin.pins import cmake_flag_name
from ci.schema import DID_YOU_MEAN

CACHE_LINE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.+-]*):([A-Z]+)=", re.MULTILINE)
DECLARED_TYPES = ("BOOL", "STRING", "PATH", "FILEPATH")  # what option() and set(... CACHE TYPE) give
# read as plain variables, never declared: ggml-hip forwards them to CMAKE_HIP_ARCHITECTURES (ggml/src/ggml-hip/
# CMakeLists.txt lines 35-40 at ROCmFPX c14872f); the HIP profiles pass GPU_TARGETS and the cache keeps it UNINITIALIZED
READ_UNDECLARED = ("GPU_TARGETS", "AMDGPU_TARGETS")
# How alike what follows GGML_ (or LLAMA_) must be, as difflib's ratio, for a declared option to be suggested. The
# shared prefix is left out: with it, GGML_FMA was 0.64 like GGML_TYPO_FLAG and passed difflib's usual 0.6. Measured
# on ggml's options: GGML_NATVE 0.91, GGML_OPNEMP 0.83, GGML_CUAD 0.75 to their options; GGML_HIP_ROCMI4_W4A4 0.62 to
# GGML_HIP_ROCWMMA_FATTN, another option altogether
CLOSE = 0.7

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
        out.append(UNDECLARED.format(flag=flag, name=name, suggestion=closest_option(name, declared)))
    return out


def closest_option(name: str, declared: Iterable[str]) -> str:
    """A DID_YOU_MEAN for the declared option closest to ``name`` in what follows their shared prefix (``GGML_``), or
    nothing when none is close (CLOSE)."""
    prefix = name.split("_", 1)[0] + "_"
    by_rest = {option[len(prefix) :]: option for option in declared if option.startswith(prefix)}
    if not by_rest or name == prefix:
        by_rest, prefix = {option: option for option in declared}, ""
    close = difflib.get_close_matches(name[len(prefix) :], list(by_rest), n=1, cutoff=CLOSE)
    return DID_YOU_MEAN.format(choice=by_rest[close[0]]) if close else ""


def check_cache(build_dir: Path, flags: Iterable[str]) -> list[str]:
    cache = build_dir / "CMakeCache.txt"
    if not cache.is_file():
        return []
    return undeclared(cache.read_text(encoding="utf-8", errors="replace"), flags)
