"""Build profiles: which backend, which CMake flags, which device the gates test. Pure data.

Flags that belong to a pin (the fork's own option names) live in pins.yaml's
``build`` section, never here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ci.errors import ConfigError
from ci.schema import did_you_mean

DEFAULT_PROFILE = "gfx1151"

# Messages, shared with the tests that match on them (tests/support/messages.py)
UNKNOWN_PROFILE = "{given}: unknown profile{suggestion}; known: {known}"  # given: GIVEN_AS or the variable
GIVEN_AS = "--profile {name}"
GIVEN_TWICE = "--profiles: {name} given twice"
NO_PROFILE_GIVEN = "--profiles: no profile given (e.g. --profiles gfx1151,cuda)"

# Every profile's binaries find the build's libraries by RUNPATH $ORIGIN, not by the build directory's absolute path:
# the manifest's link closure (ci/compile/manifest.py) and serve's private copy of a gated llama-server both follow
# $ORIGIN, and an absolute build path reaches whatever sits at that path on the serving machine. Built with the install
# RPATH, not CMAKE_BUILD_RPATH_USE_ORIGIN: for the fork's 89 targets with install rules that gave "$ORIGIN:", CMake's
# padding for a later install-time rewrite, and an empty entry is the current directory to ld.so (the manifest refused
# the build); with these, all 99 targets link with "$ORIGIN" alone (ciru-ai c14872f's build.ninja, 2026-12-05).
EVERY_PROFILE = ("-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN")


@dataclass(frozen=True)
class Profile:
    name: str
    backend: str  # "hip", "cuda", "vulkan", "cpu": which toolchain it needs
    device: str  # the name test-backend-ops -b and llama-server --device take
    flags: tuple[str, ...]
    about: str
    # Variables of this machine's environment that the profile's build and gates need beyond ci.command's allow-list
    # (PATH, HOME, LANG, LC_*, TMPDIR and the families that can change a result, GGML_*, VK_*, HIP_*, CUDA_*, ...):
    # passed on when set, and recorded in every gate record of the profile (docs/release.md, "The environment")
    variables: tuple[str, ...] = ()

    @property
    def serve_device(self) -> str:
        """The serve launcher's ``--device`` for this profile's builds."""
        return {"hip": "rocm", "cuda": "cuda", "vulkan": "vulkan"}.get(self.backend, "cpu")


def _hip(arch: str, about: str) -> Profile:
    return Profile(
        name=arch,
        backend="hip",
        device="ROCm0",
        flags=(
            *EVERY_PROFILE,
            "-DGGML_HIP=ON",
            f"-DGPU_TARGETS={arch}",
            f"-DCMAKE_HIP_ARCHITECTURES={arch}",
            # hipBLAS gave wrong GEMMs on gfx1151 (ROCm/rocm-libraries#11530): MMQ kernels instead
            "-DGGML_HIP_FORCE_MMQ=ON",
        ),
        about=about,
    )


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        _hip("gfx1151", "AMD Strix Halo (RDNA 3.5), the engine's box: HIP through ROCm"),
        _hip("gfx1100", "RDNA3 (RX 7900): HIP through ROCm"),
        _hip("gfx1201", "RDNA4 (RX 9070): HIP through ROCm"),
        Profile("cuda", "cuda", "CUDA0", (*EVERY_PROFILE, "-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90"), "NVIDIA, sm_90 (H100/H200) unless overridden"),
        # the H200's Vulkan: the NVIDIA driver's manifest (VK_DRIVER_FILES) and an SDK newer than the system's headers
        Profile("vulkan", "vulkan", "Vulkan0", (*EVERY_PROFILE, "-DGGML_VULKAN=ON"), "any Vulkan GPU", ("VK_DRIVER_FILES", "VULKAN_SDK")),
        Profile("cpu", "cpu", "CPU", EVERY_PROFILE, "the CPU alone (CI, and the reference path)"),
    )
}


def get(name: str, given: str | None = None) -> Profile:
    """The profile ``name``; a ConfigError naming it as it was given (default ``--profile NAME``) when unknown."""
    try:
        return PROFILES[name]
    except KeyError:
        shown = given or GIVEN_AS.format(name=name)
        raise ConfigError(UNKNOWN_PROFILE.format(given=shown, suggestion=did_you_mean(name, PROFILES), known=", ".join(PROFILES))) from None


def runner_labels(profile: Profile) -> list[str]:
    """The labels of the self-hosted runner that builds and tests ``profile`` (docs/ci.md): a HIP profile wants a
    runner with that GPU (``gfx1151``), the others one with their backend (``cuda``, ``vulkan``); the CPU profile
    runs anywhere."""
    if profile.backend == "cpu":
        return ["ubuntu-latest"]
    return ["self-hosted", "linux", profile.name if profile.backend == "hip" else profile.backend]


def matrix(names: Sequence[str]) -> dict[str, list[dict[str, object]]]:
    """The GitHub Actions matrix of the GPU job: one entry per profile, with its runner labels and device."""
    chosen = [get(n) for n in names]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(GIVEN_TWICE.format(name=name))
    if not chosen:
        raise ConfigError(NO_PROFILE_GIVEN)
    return {"include": [{"profile": p.name, "device": p.device, "runs-on": runner_labels(p)} for p in chosen]}
