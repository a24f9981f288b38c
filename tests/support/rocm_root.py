"""tools/rocm_root.py, a script and not a package's module, loaded as the module ``rocm_root`` for its tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "rocm_root.py"


def load() -> ModuleType:
    if "rocm_root" in sys.modules:
        return sys.modules["rocm_root"]
    spec = importlib.util.spec_from_file_location("rocm_root", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["rocm_root"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
