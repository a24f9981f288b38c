"""The one environment of every program a gate or a build starts: an allow-list of this process's variables, what
is refused because it loads other code, and what a gate record carries of it (the criterion ``environment``).

The job's declared names (its profile's variables, pins.yaml's ``environment``) are one frozen value,
:class:`Declared`, set once the command has resolved its job (:func:`declare`) and readable by every stage.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.machinery
import os
import re
import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from ci.errors import Refused

# Messages, shared with the tests that match on them (tests/support/messages.py)
LOADS_CODE_SET = "{name} is set: it loads code into every program a gate or a build starts, whose results would not be the build's; unset it"
FLAG_FROM_ENV = "{name} is set: llama-server takes it as a flag that no gate planned; unset it (a gate's flags are its own)"
JUDGES_OWN = "it changes how the gates themselves run and judge (pytest's options, Python's start-up, this tool's own settings)"
NOT_PASSABLE = "ONEBIT_PASS_ENV names {name}: " + JUDGES_OWN + "; take it out"
LIBRARY_PATH_OUTSIDE = (
    "LD_LIBRARY_PATH: the entry '{entry}' is outside the system's and this Python's library folders ({folders}): a library there loads in "
    "place of the build's in every program a gate starts, and 1bit serve runs without it; unset it, or name only those folders"
)
START_UP_CODE = (
    "PYTHONPATH: the entry '{entry}' holds {name}, which every Python a gate starts runs before anything of its own "
    "(the route gate's pytest, the launcher); take it out of PYTHONPATH"
)
REPLACES_MODULE = (
    "PYTHONPATH: the entry '{entry}' holds a module {module} ({held}), which every Python a gate starts would import in "
    "place of {theirs}; take it out of PYTHONPATH: it may add modules, never replace one"
)
STANDARD_LIBRARY = "the standard library's {module}"  # REPLACES_MODULE's theirs; else the path of the one replaced
NOT_A_FOLDER = (
    "PYTHONPATH: the entry '{entry}' is a file (an archive Python imports modules from), whose modules are not looked "
    "into; name folders only"
)
NOT_ABSOLUTE = (
    "{name}: the entry '{entry}' is not an absolute path: an empty or relative entry is searched from the working "
    "directory, where a planted library loads; give absolute paths only"
)

# -- the environment of every program -------------------------------------------------------------------------------
# Every program a gate or a build starts (cmake running the fork's CMakeLists, test-backend-ops, test-llama-archs,
# 1bit serve and its llama-server) is given these from this process's environment, and no other variable: a fork
# commit or a patch read ONEBIT_LEDGER_KEY from the whole environment it was given, and could sign any record.
# Passed, not recorded: where programs and the home folder are, the locale, the temporary folder.
BASE = ("PATH", "HOME", "LANG", "TMPDIR")
BASE_PREFIXES = ("LC_",)
# Passed and recorded, as every gate record's criterion ``environment`` (ci/release/binding.py), so that a pass under
# one setting never counts for another: what changes what a program computes or loads. ggml's and llama.cpp's knobs
# (GGML_VK_DISABLE_GRAPH_OPTIMIZE turns the MTP leg's verdict on Vulkan: docs/gates.md), the loader's, the GPU stacks'
# (Vulkan and its Mesa drivers, HIP/ROCm, CUDA), OpenMP's and BLAS's threads; and the launcher's Python path.
RESULT_PREFIXES = (
    "GGML_", "LLAMA_", "LD_", "VK_", "HIP_", "HSA_", "ROCR_", "ROCM_", "ROCBLAS_", "HIPBLASLT_", "AMD_", "GPU_",
    "CUDA_", "NVIDIA_", "MESA_", "RADV_", "OMP_", "GOMP_", "KMP_", "OPENBLAS_",
)  # fmt: skip
RESULT_NAMES = ("PYTHONPATH", "DRI_PRIME")
# Names the operator passes on besides (split on commas and blanks): passed and recorded as the families are. Never
# the judges' own: PYTEST_ADDOPTS="-k hadamard" passed that way made the route gate's record 18/18 of 180 (a hostile
# pass, 2026-12-05), so pytest's, Python's start-up (but PYTHONPATH) and this tool's own variables are refused there,
# and in pins.yaml's ``environment`` (ci.pin.pins), which names them for every machine.
PASS_VAR = "ONEBIT_PASS_ENV"
NOT_PASSABLE_NAMES = re.compile(r"PYTEST_\w*|PY_COLORS|PYTHON(?!PATH$)\w*|ONEBIT_\w*|NOX_\w*")
# Never given to any program, however it is started or named: whoever reads the key can sign any ledger record, and the
# witness names the file that stops a rewind (ci/release/ledger.py's KEY_VAR and WITNESS_VAR).
NEVER_PASSED = ("ONEBIT_LEDGER_KEY", "ONEBIT_LEDGER_WITNESS")
# Refused: no program starts while one is set (named or in a family). They make a loader take code from where they
# point (ld.so's own, ggml's out-of-tree backends, the Vulkan loader's layers, the ROCm and CUDA tool and injection
# libraries; serve/launch.py drops the same for a gated llama-server), or give llama-server flags past the gate's plan.
LOADS_CODE = re.compile(
    r"LD_PRELOAD|LD_AUDIT|GGML_BACKEND_PATH|VK_(?:LAYER_PATH|ADD_LAYER_PATH|IMPLICIT_LAYER_PATH|ADD_IMPLICIT_LAYER_PATH|"
    r"INSTANCE_LAYERS|LOADER_LAYERS_ENABLE)|HSA_TOOLS_LIB|ROCP_TOOL_LIBS?|ROCTX_LIB|HIP_[A-Z_]*TOOL[A-Z_]*|"
    r"CUDA_INJECTION64_PATH|NVTX_INJECTION64_PATH"
)
FLAGS_FROM_ENV = re.compile(r"LLAMA_ARG_\w*")
# Lists of paths a loader searches, or files it loads (the Vulkan driver, which the H200's profile names): each entry
# absolute. An empty or relative one is the working directory, where a planted libgcc_s.so.1 ran inside the gates.
PATH_LISTS = ("LD_LIBRARY_PATH", "VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES", "PYTHONPATH")
# What a Python runs at start-up from the first folder of sys.path holding it (site's hooks)
START_UP_MODULES = ("sitecustomize.py", "sitecustomize", "usercustomize.py", "usercustomize")
# Every Python a gate starts searches PYTHONPATH before its standard library and installed packages: a module there
# named like one of those, or like the project's own packages, runs in its place. A pytest.py there was the route
# gate's pytest and wrote a passing JUnit; a serve/ there was the launcher ci digested and shipped while the route
# tests judged the checkout's (hostile pass 5, tests/hostile/test_pass5_*.py). So an entry may add modules, never
# replace one.


@dataclass(frozen=True)
class Declared:
    """The names a job declares beyond the allow-list: passed and recorded as the families are, for every program of
    the job whichever stage starts it (the vulkan profile's VULKAN_SDK once reached its build but none of its gates')."""

    names: frozenset[str] = frozenset()


_JOB = [Declared()]  # the job's, replaced whole by declare(): this process runs one command's job


def declare(names: Iterable[str]) -> None:
    """The names the job declares, from now on; each is checked where it is declared (a profile, pins.yaml)."""
    _JOB[0] = Declared(frozenset(names))


def declared_by_job() -> frozenset[str]:
    return _JOB[0].names


def passed_on(name: str, declared: Collection[str] = ()) -> bool:
    """Whether a variable ``name`` of this process's environment is given to the programs it starts."""
    return name not in NEVER_PASSED and (name in BASE or name.startswith(BASE_PREFIXES) or recorded(name, declared))


def recorded(name: str, declared: Collection[str] = ()) -> bool:
    """Whether ``name`` is one that can change a result: passed on, and recorded in every gate record. ``declared``:
    names declared beside the job's (:func:`declare`)."""
    return name not in NEVER_PASSED and (
        name.startswith(RESULT_PREFIXES) or name in RESULT_NAMES or name in declared or name in _JOB[0].names
    )


def not_passable(name: str) -> bool:
    """Whether ``name`` is one of the judges' own variables, which no list of names to pass on may hold."""
    return NOT_PASSABLE_NAMES.fullmatch(name) is not None or name in NEVER_PASSED


def _declared(source: Mapping[str, str], declared: Iterable[str]) -> frozenset[str]:
    named = source.get(PASS_VAR, "").replace(",", " ").split()
    for name in named:
        if not_passable(name):
            raise Refused(NOT_PASSABLE.format(name=name))
    return frozenset((*declared, *named))


def environment(
    source: Mapping[str, str] | None = None, *, declared: Iterable[str] = (), given: Mapping[str, str] | Iterable[tuple[str, str]] = ()
) -> dict[str, str]:
    """The environment of a program a gate or a build starts: from ``source`` (default: this process's environment)
    the variables :func:`passed_on` names, the declared ones (the job's, :func:`declare`; ``declared``, the build's;
    :data:`PASS_VAR`'s) among them, then
    ``given`` (what the caller sets: the toolchain's ROCM_PATH, the launcher's bytecode folder) over them. Never the
    ledger's key or witness. A variable that loads code (:data:`LOADS_CODE`), a flag of llama-server's, or a path
    list with an empty or relative entry is refused, and nothing starts."""
    source = os.environ if source is None else source
    names = _declared(source, declared)
    env = {k: v for k, v in source.items() if passed_on(k, names)}
    env.update(given)
    for name in NEVER_PASSED:
        env.pop(name, None)
    for name, value in env.items():
        if LOADS_CODE.fullmatch(name):
            raise Refused(LOADS_CODE_SET.format(name=name))
        if FLAGS_FROM_ENV.fullmatch(name):
            raise Refused(FLAG_FROM_ENV.format(name=name))
        if name in PATH_LISTS:
            entry = next((e for e in value.split(os.pathsep) if not os.path.isabs(e)), None)
            if entry is not None:
                raise Refused(NOT_ABSOLUTE.format(name=name, entry=entry))
    _refuse_other_code(source)
    return env


def _refuse_other_code(source: Mapping[str, str]) -> None:
    """Refuse what this process's environment would make a gate's programs load in place of the build's or the
    project's code: a library folder outside the system's (``1bit serve`` runs llama-server without one), a Python
    path entry holding start-up code or a module that replaces one (:func:`replaced_module`). What the orchestration
    itself sets (``given``) is not the user's to refuse."""
    from ci import loaded

    entries = [e for e in source.get("LD_LIBRARY_PATH", "").split(os.pathsep) if e]
    if entries:
        folders = loaded.library_folders()
        outside = next((e for e in entries if not loaded.inside(e, folders)), None)
        if outside is not None:
            raise Refused(LIBRARY_PATH_OUTSIDE.format(entry=outside, folders=", ".join(folders)))
    python_path = [e for e in source.get("PYTHONPATH", "").split(os.pathsep) if e]
    for entry in python_path:
        found = next((n for n in START_UP_MODULES if os.path.lexists(os.path.join(entry, n))), None)
        if found is not None:
            raise Refused(START_UP_CODE.format(entry=entry, name=found))
    problem = replaced_module(python_path, [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e])
    if problem is not None:
        raise Refused(problem)


def replaced_module(python_path: Iterable[str], also_not: Iterable[str] = ()) -> str | None:
    """Why a Python given ``python_path`` as its PYTHONPATH would import a module of an entry in place of its own
    (REPLACES_MODULE), or None. Its own: for the project's packages (ci, serve, tests) the project's folders; for any
    other, the one this Python finds outside those entries (and ``also_not``'s, this process's own PYTHONPATH) and the
    working directory, and for a standard-library name any. An entry that is a file is refused (NOT_A_FOLDER)."""
    from ci.digests import PROJECT_PACKAGES, PROJECT_ROOT

    entries = list(python_path)
    left_out = {os.path.realpath(e) for e in (*entries, *also_not, os.curdir)}
    rest = [p for p in sys.path if p and os.path.realpath(p) not in left_out]
    for entry in entries:
        if os.path.exists(entry) and not os.path.isdir(entry):
            return NOT_A_FOLDER.format(entry=entry)
        for module, held in modules_in(entry).items():
            places = [str(PROJECT_ROOT / module)] if module in PROJECT_PACKAGES else _places_of(module, rest)
            if _same_place(held, places) or (not places and module not in sys.stdlib_module_names):
                continue
            theirs = STANDARD_LIBRARY.format(module=module) if module in sys.stdlib_module_names else places[0]
            return REPLACES_MODULE.format(entry=entry, module=module, held=held, theirs=theirs)
    return None


def modules_in(folder: str) -> dict[str, str]:
    """The top-level modules an import finds in ``folder``, by name, and where: a package (a folder holding an
    ``__init__`` of any suffix Python imports) or a module (a source, bytecode, a compiled module). A folder without
    ``__init__`` is a namespace portion, which a regular module of the same name found later wins over."""
    suffixes = importlib.machinery.all_suffixes()  # the compiled modules' long suffixes before the plain .so
    try:
        names = sorted(os.listdir(folder))
    except OSError:  # not there (yet): nothing to import from it now
        return {}
    found: dict[str, str] = {}
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            if name.isidentifier() and any(os.path.isfile(os.path.join(path, "__init__" + s)) for s in suffixes):
                found.setdefault(name, path)
            continue
        module = next((name[: -len(s)] for s in suffixes if name.endswith(s)), "")
        if module.isidentifier():
            found.setdefault(module, path)
    return found


def _places_of(module: str, path: list[str]) -> list[str]:
    """Where this Python finds the top-level ``module`` on ``path``: a module's file, a package's folder or folders."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(module, path)
    except (ImportError, OSError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations is not None:
        return list(spec.submodule_search_locations)
    return [spec.origin] if spec.origin else []


def _same_place(held: str, places: list[str]) -> bool:
    return os.path.realpath(held) in {os.path.realpath(p) for p in places}


def recorded_environment(source: Mapping[str, str] | None = None, declared: Iterable[str] = ()) -> dict[str, str]:
    """What a gate record carries of the environment its programs ran in (the criterion ``environment``): every
    variable of ``source`` that can change a result (:func:`recorded`: the families, the job's declared names,
    ``declared`` and :data:`PASS_VAR`'s), by name, sorted."""
    source = os.environ if source is None else source
    names = _declared(source, declared)
    return {k: source[k] for k in sorted(source) if recorded(k, names)}


_PR_SET_DUMPABLE = 4


def hide_secrets() -> bool:
    """With the ledger's key or witness in this process's environment, make it not dumpable (Linux's prctl
    PR_SET_DUMPABLE 0), so that no other process of this user reads its ``/proc/PID/environ`` or its memory (the
    allow-list keeps the key out of the programs' own environments only). Whether it was done."""
    if not any(os.environ.get(name) for name in NEVER_PASSED) or not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        return bool(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    return False
