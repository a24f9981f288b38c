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


# Peak memory bandwidth, bytes a second, by what a device's name holds (the vendors' figures): decode reads every weight
# once a token, so decode t/s x weight bytes a token over this is how near the physical limit a build decodes
PEAK_BANDWIDTH: tuple[tuple[str, float], ...] = (
    ("H100 80GB HBM3", 3.35e12),  # H100 SXM
    ("H100 NVL", 3.9e12),
    ("H100 PCIe", 2.0e12),
    ("H200", 4.8e12),
    ("gfx1151", 256e9),  # Strix Halo: 256-bit LPDDR5X-8000
    ("Radeon 8060S", 256e9),  # Strix Halo's GPU, as Vulkan names it
)
_DESCRIBED_RE = re.compile(r"^\s+([A-Za-z]+\d+):\s*(.+?)\s*(?:\(|$)", re.MULTILINE)


def described(llama_server: Path, device: str) -> str:
    """What ``llama-server --list-devices`` says of the first device of the serve device's backend (``cuda``:
    ``CUDA0: NVIDIA H100 80GB HBM3``), or the serve device's name when it lists none (the CPU)."""
    backend = {serve: backend for backend, serve in ORDER}.get(device)
    if backend is None:
        return device
    done = command.run([str(llama_server), "--list-devices"], timeout=60, check=False, quiet=True)
    for name, text in _DESCRIBED_RE.findall(done.output):
        if name.startswith(backend):
            return f"{name}: {text}"
    return device


def peak_bandwidth(description: str) -> float | None:
    """The device's peak memory bandwidth in bytes a second, from :data:`PEAK_BANDWIDTH`; None when not known."""
    return next((peak for part, peak in PEAK_BANDWIDTH if part in description), None)
