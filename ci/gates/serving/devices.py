"""``--device auto`` for the gates and the bench: what the llama-server binary itself can run on.

``llama-server --list-devices`` is asked once per binary (cached by its sha256) and the device is the first the
binary has in the route's order: rocm, vulkan, cuda, then cpu. (``1bit serve`` keeps its own documented default.)
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from ci import command
from ci.files import cache_dir, sha256_cached, write_atomic

ORDER = (("ROCm", "rocm"), ("Vulkan", "vulkan"), ("CUDA", "cuda"))
_DEVICE_RE = re.compile(r"^\s+([A-Za-z]+)\d+:", re.MULTILINE)


def listed(llama_server: Path) -> tuple[str, ...]:
    """The device names the binary lists (``CUDA0``'s backend ``CUDA``, ...), from the cache when it was asked before."""
    entry = cache_dir() / "devices" / sha256_cached(llama_server)
    with contextlib.suppress(OSError):
        return tuple(entry.read_text().split())
    done = command.run([str(llama_server), "--list-devices"], timeout=60, check=False, quiet=True)
    names = tuple(dict.fromkeys(_DEVICE_RE.findall(done.output)))
    if done.returncode == 0:
        with contextlib.suppress(OSError):
            write_atomic(entry, " ".join(names) + "\n")
    return names


def auto(llama_server: Path) -> str:
    """The serve device for ``--device auto``: rocm, vulkan, cuda, then cpu, as far as the binary has them."""
    have = listed(llama_server)
    return next((device for backend, device in ORDER if backend in have), "cpu")
