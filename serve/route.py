"""The route: a pure function from (GGUF facts, options, environment, recipes) to the llama-server command.

Nothing here reads a file, looks at ``os.environ`` or starts a process; :mod:`serve.cli` gathers the inputs and
runs the result. The rules are the engine's lean-ROCm behaviour (engine #194, #205, #229), docs/serve.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from serve import flags
from serve.errors import A_GGUF_FILE, Refused, UsageError, did_you_mean, printable
from serve.facts import HADAMARD_GROUP, HADAMARD_KEY, GGUFFacts
from serve.recipes import DEVICES, Applied, LaunchFacts, RecipeSet, apply

DEVICE_CHOICES = ("auto", *DEVICES)
DEFAULT_DEVICE_VAR = "ONEBIT_SERVE_DEVICE"
DEFAULT_DEVICE = "vulkan"  # the engine's general route; Hadamard-rotated files take the lean ROCm route
PROFILES = {"rocm": "gfx1151", "cuda": "cuda", "cpu": "cpu", "vulkan": "vulkan"}
FLASH_ATTN = ("on", "off", "auto")
W4A4_VAR = "GGML_W4A4_TENSORS"
DFLASH_ARCH = "dflash"
DFLASH_FALLBACK_DRAFT = 16  # the engine's draft length for a drafter without dflash.block_size
PROGRAM = "llama-server"  # argv[0] until serve knows which binary (RouteDecision.with_program)

DEVICE_ARGS: dict[str, tuple[str, ...]] = {
    "rocm": ("--device", "ROCm0", "-ngl", "99"),
    "vulkan": ("--device", "Vulkan0", "-ngl", "99"),
    "cuda": ("--device", "CUDA0", "-ngl", "99"),
    "cpu": ("-ngl", "0"),
}
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")

# Messages, shared with the tests that match on them (tests/support/messages.py)
# refusals (serve.errors.AT puts the option, variable or file first)
UNKNOWN_DEVICE = 'unknown device "{device}"{suggestion}; choose from {choices}'
NOT_A_PROFILE_NAME = '"{profile}" is not a profile name (letters, digits, ".", "_", "-")'
NOT_A_PORT = "{port} is not a TCP port (1-65535)"
NEGATIVE_CTX_SIZE = "{ctx_size} is negative (0 takes the model's own context)"
NOT_A_CHOICE = '"{value}" is not one of {choices}'
TWO_DRAFTERS = "--dflash and --mtp are two drafters; pick one"
DRAFT_LENGTH_WITHOUT_DRAFTER = "sets the draft length of a drafter: give --dflash DRAFT.gguf or --mtp HEAD.gguf"
P_MIN_WITHOUT_DRAFTER = "sets the drafter's minimum probability: give --dflash DRAFT.gguf or --mtp HEAD.gguf"
NOT_A_PROBABILITY = '"{value}" is not a probability (0 to 1)'
MODEL_AFTER_DOUBLE_DASH = "the model is 1bit serve's -m MODEL.gguf, before --: its GGUF header decides the route"
NOT_A_DEVICE = '"{value}" is not a device{suggestion}; choose from {choices}'
ROTATED_REFUSED = (
    "is Hadamard-rotated ({key} = {group}): only the lean ROCm build undoes the rotation; serve it with --device rocm (or auto)"
)
NOT_DFLASH = 'architecture is "{architecture}", not "{expected}": --dflash takes a DFlash drafter{hint}'
MTP_HINT = " (an MTP head goes to --mtp)"
NO_MTP_LAYERS = (
    "{key} is {value}: no MTP layers, and --mtp takes an MTP head (llama-server would stop with "
    "\"model doesn't contain MTP layers\"){hint}"
)
ABSENT = "absent"
DFLASH_HINT = "; a DFlash drafter goes to --dflash"
# notes on the decision
AUTO_DEVICE = "--device auto: {device}, {why}"
AUTO_ROTATED = "the file is Hadamard-rotated"
AUTO_DEFAULT = "the default device (set {variable} to change it)"
AUTO_FROM_VARIABLE = "from {variable}"
OTHER_STAMP = "{key} is {stamp}, not {group}: not treated as Hadamard-rotated"
LEAN_ROCM = "lean ROCm route, W4A4 prompt processing"
W4A4_KEPT = '{variable} is already set ("{value}"{meaning}): kept'
EXACT_INT8 = ", exact int8"  # what an empty GGML_W4A4_TENSORS means
ROTATED_ELSEWHERE = "Hadamard-rotated file on {device}: the engine measured this route on ROCm (gfx1151) only"
FLASH_ATTN_ON_ROCM = (
    "-fa {value}: not passed on rocm, where llama-server's default (auto, on) stays "
    "(flash attention off drops pp16384 to 337 t/s, engine #205); give it after -- to force it"
)
REPLACED = '"{given}" after -- replaces serve\'s "{own}"'
RECIPES_OFF = "recipes off (--no-recipes)"
DRAFT_LENGTH = "draft length {length}: {why}"
FROM_BLOCK_SIZE = "the drafter's {architecture}.block_size {block_size} minus its anchor token"
NO_BLOCK_SIZE = "the drafter has no block size to follow"
EMPTY_PATH = "is empty; give the path of {what}"  # a path flag given as ""
SMALL_BLOCK_SIZE = "the drafter has {architecture}.block_size {block_size}, so no block size to follow"


@dataclass(frozen=True)
class RouteOptions:
    """What the user asked for, as parsed from the command line (paths as given)."""

    model: str
    device: str = "auto"
    profile: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    ctx_size: int | None = None
    flash_attn: str | None = None
    dflash: str | None = None
    mtp: str | None = None
    mtp_max: int | None = None
    mtp_p_min: str | None = None
    long_model: bool = False  # this launch serves long prompts: the recipes that match long_model apply
    extra: tuple[str, ...] = ()

    @property
    def drafter_path(self) -> str | None:
        return self.dflash or self.mtp

    @property
    def drafter_kind(self) -> str:
        return "dflash" if self.dflash else "mtp" if self.mtp else "none"


@dataclass(frozen=True)
class RouteDecision:
    """The llama-server command line, the variables serve adds or changes, and why."""

    device: str
    profile: str
    argv: tuple[str, ...]
    env_added: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    recipes_applied: tuple[Applied, ...] = ()

    @property
    def env(self) -> dict[str, str]:
        return dict(self.env_added)

    def with_program(self, program: str) -> RouteDecision:
        return replace(self, argv=(program, *self.argv[1:]))

    def with_note(self, note: str) -> RouteDecision:
        return replace(self, notes=(*self.notes, note))

    def to_json(self) -> dict[str, Any]:
        """The ``--dry-run`` object: argv, the added env, notes and the ids of the recipes applied."""
        return {"argv": list(self.argv), "env": self.env, "notes": list(self.notes), "recipes": [r.id for r in self.recipes_applied]}


def check_options(o: RouteOptions) -> None:
    """What can be refused before any file is read."""
    for flag, path in (("-m", o.model), ("--dflash", o.dflash), ("--mtp", o.mtp)):
        if path is not None and not path:  # "" named no file, yet was given: a drafter dropped unseen, or no path to name
            raise UsageError(EMPTY_PATH.format(what=A_GGUF_FILE), flag)
    if o.device not in DEVICE_CHOICES:
        raise UsageError(
            UNKNOWN_DEVICE.format(device=o.device, suggestion=did_you_mean(o.device, DEVICE_CHOICES), choices=", ".join(DEVICE_CHOICES)),
            "--device",
        )
    if o.profile is not None and not _PROFILE_NAME.match(o.profile):
        raise UsageError(NOT_A_PROFILE_NAME.format(profile=o.profile), "--profile")
    if not o.host:
        raise UsageError("is empty", "--host")
    if not 1 <= o.port <= 65535:
        raise UsageError(NOT_A_PORT.format(port=o.port), "--port")
    if o.ctx_size is not None and o.ctx_size < 0:
        raise UsageError(NEGATIVE_CTX_SIZE.format(ctx_size=o.ctx_size), "--ctx-size")
    if o.flash_attn is not None and o.flash_attn not in FLASH_ATTN:
        raise UsageError(NOT_A_CHOICE.format(value=o.flash_attn, choices=", ".join(FLASH_ATTN)), "--flash-attn")
    if o.dflash and o.mtp:
        raise Refused(TWO_DRAFTERS)
    if o.mtp_max is not None:
        if not o.drafter_path:
            raise UsageError(DRAFT_LENGTH_WITHOUT_DRAFTER, "--mtp-max")
        if o.mtp_max < 1:
            raise UsageError(f"{o.mtp_max} is not a draft length (1 or more)", "--mtp-max")
    if o.mtp_p_min is not None:
        if not o.drafter_path:
            raise UsageError(P_MIN_WITHOUT_DRAFTER, "--mtp-p-min")
        try:
            p = float(o.mtp_p_min)
        except ValueError:
            p = math.nan
        if not 0.0 <= p <= 1.0:
            raise UsageError(NOT_A_PROBABILITY.format(value=o.mtp_p_min), "--mtp-p-min")
    if "-m" in flags.flags_in(o.extra):
        raise UsageError(MODEL_AFTER_DOUBLE_DASH, "-m after --")


def default_device(environ: Mapping[str, str]) -> tuple[str, str]:
    """The device for an unrotated file on ``--device auto``, and where it came from."""
    value = environ.get(DEFAULT_DEVICE_VAR, "")
    if not value:
        return DEFAULT_DEVICE, AUTO_DEFAULT.format(variable=DEFAULT_DEVICE_VAR)
    if value not in DEVICES:
        raise UsageError(
            NOT_A_DEVICE.format(value=value, suggestion=did_you_mean(value, DEVICES), choices=", ".join(DEVICES)), DEFAULT_DEVICE_VAR
        )
    return value, AUTO_FROM_VARIABLE.format(variable=DEFAULT_DEVICE_VAR)


def route(
    model: GGUFFacts,
    drafter: GGUFFacts | None,
    options: RouteOptions,
    environ: Mapping[str, str],
    recipes: RecipeSet | None,
) -> RouteDecision:
    """The llama-server launch for ``model`` (and its drafter) under ``options``.

    ``environ`` is the environment serve runs in (a variable set there, even empty, is the user's choice);
    ``recipes`` None means ``--no-recipes``.
    """
    o = options
    check_options(o)
    if (drafter is None) != (o.drafter_path is None):
        raise ValueError("the drafter's facts and --dflash/--mtp disagree")  # a caller's bug, not the user's
    notes: list[str] = []
    env: dict[str, str] = {}

    if model.hadamard_stamp is not None and not model.hadamard_q4_0:
        notes.append(OTHER_STAMP.format(key=HADAMARD_KEY, stamp=model.hadamard_stamp, group=HADAMARD_GROUP))
    device = o.device
    if device == "auto":
        if model.hadamard_q4_0:
            device = "rocm"
            notes.append(AUTO_DEVICE.format(device=device, why=AUTO_ROTATED))
        else:
            device, why = default_device(environ)
            notes.append(AUTO_DEVICE.format(device=device, why=why))
    if model.hadamard_q4_0:
        if device in ("vulkan", "cpu"):
            raise Refused(ROTATED_REFUSED.format(key=HADAMARD_KEY, group=HADAMARD_GROUP), model.path)
        if device == "rocm":
            notes.append(LEAN_ROCM)
            if W4A4_VAR in environ:
                given = environ[W4A4_VAR]
                notes.append(W4A4_KEPT.format(variable=W4A4_VAR, value=given, meaning="" if given else EXACT_INT8))
            else:
                env[W4A4_VAR] = "all"
        else:
            notes.append(ROTATED_ELSEWHERE.format(device=device))

    base: list[str] = ["-m", o.model, *DEVICE_ARGS[device]]
    if o.flash_attn is not None:
        if device == "rocm":
            notes.append(FLASH_ATTN_ON_ROCM.format(value=o.flash_attn))
        else:
            base += ["-fa", o.flash_attn]
    base.append("--jinja")
    if o.ctx_size is not None:
        base += ["-c", str(o.ctx_size)]
    base += ["--host", o.host, "--port", str(o.port)]
    base += _drafter_args(drafter, o, device, notes)

    user = flags.flags_in(o.extra)
    last_given = {flags.canonical(u[0]): u for u in flags.units(o.extra)}
    kept: list[str] = []
    for unit in flags.units(base):
        flag = flags.canonical(unit[0])
        if flag in user:
            notes.append(REPLACED.format(given=" ".join(last_given[flag]), own=" ".join(unit)))
            continue
        kept.extend(unit)

    applied: tuple[Applied, ...] = ()
    if recipes is None:
        notes.append(RECIPES_OFF)
    else:
        facts = LaunchFacts(
            device=device,
            architecture=model.architecture,
            drafter=o.drafter_kind,
            moe=model.moe,
            hadamard_q4_0=model.hadamard_q4_0,
            long_model=o.long_model,
        )
        applied, recipe_notes = apply(recipes, facts, [*kept, *o.extra], set(environ) | set(env))
        notes.extend(recipe_notes)
        for a in applied:
            kept.extend(a.args)
            env.update(a.env)

    return RouteDecision(
        device=device,
        profile=o.profile or PROFILES[device],
        argv=(PROGRAM, *kept, *o.extra),
        env_added=tuple(env.items()),
        notes=tuple(notes),
        recipes_applied=applied,
    )


def _drafter_args(drafter: GGUFFacts | None, o: RouteOptions, device: str, notes: list[str]) -> list[str]:
    if drafter is None:
        return []
    # the drafter runs where the model runs: -ngld follows -ngl (0 on the cpu route)
    ngld = "0" if device == "cpu" else "99"
    if o.dflash:
        if drafter.architecture != DFLASH_ARCH:
            raise Refused(NOT_DFLASH.format(architecture=printable(drafter.architecture), expected=DFLASH_ARCH, hint=MTP_HINT), drafter.path)
        args = ["--spec-type", "draft-dflash", "-md", o.dflash, "-ngld", ngld]
        if o.mtp_max is not None:
            n, why = o.mtp_max, "--mtp-max"
        elif drafter.block_size is not None and drafter.block_size > 1:
            n, why = drafter.block_size - 1, FROM_BLOCK_SIZE.format(architecture=DFLASH_ARCH, block_size=drafter.block_size)
        elif drafter.block_size is None:
            n, why = DFLASH_FALLBACK_DRAFT, NO_BLOCK_SIZE
        else:
            n, why = DFLASH_FALLBACK_DRAFT, SMALL_BLOCK_SIZE.format(architecture=DFLASH_ARCH, block_size=drafter.block_size)
        notes.append(DRAFT_LENGTH.format(length=n, why=why))
        args += ["--spec-draft-n-max", str(n)]
    elif o.mtp is not None:
        if (drafter.nextn_layers or 0) < 1:
            value = ABSENT if drafter.nextn_layers is None else drafter.nextn_layers
            hint = DFLASH_HINT if drafter.architecture == DFLASH_ARCH else ""
            key = f"{drafter.architecture}.nextn_predict_layers"
            raise Refused(NO_MTP_LAYERS.format(key=key, value=value, hint=hint), drafter.path)
        args = ["--spec-type", "draft-mtp", "-md", o.mtp, "-ngld", ngld]
        if o.mtp_max is not None:
            args += ["--spec-draft-n-max", str(o.mtp_max)]
    else:  # a drafter's facts were read, yet neither --dflash nor --mtp names it: nothing to pass
        return []
    if o.mtp_p_min is not None:
        args += ["--spec-draft-p-min", o.mtp_p_min]
    return args
