"""Which models a run of the gates serves, and how a drafter is launched beside its target: the one answer the
equivalence and the perf gate read (and ship's standings name), so neither gate asks the other.

The model sets: ``--model``/``--drafter`` (:data:`GIVEN_MODELS`), else the release models pins.yaml names, each
checked against its sha256 (:data:`RELEASE_MODELS`), else the tiny generated ones (:data:`TINY_MODELS`). A drafter
goes through the launcher's ``--dflash`` or ``--mtp`` as its GGUF says, else as ``-md`` (:func:`drafter_launch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ci.errors import ConfigError, Refused
from ci.files import sha256_cached

if TYPE_CHECKING:
    from ci.gates.target import BuildUnderTest, GateOptions

RELEASE_MODELS = "release models"
TINY_MODELS = "tiny generated models only"
GIVEN_MODELS = "given models"

DEFAULT_SPEC_TYPE = "draft-simple"
# the facts' probe: 8 drafted tokens a step, no probability cut (the fork's 0.75 default cuts blocks short)
DRAFT_MAX = 8
DRAFT_ARGS = ("--spec-draft-n-max", str(DRAFT_MAX), "--spec-draft-p-min", "0")
MTP_SPEC_TYPE = "draft-mtp"
# An MTP head drafts from its own last guess, so its acceptance falls with each token further out: 2 a step keeps the
# tiny head's near 20% (8 a step: 5%, below the floors) and still rolls back up to 2 tokens (docs/equivalence.md)
MTP_DRAFT_MAX = 2

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_GGUF = "{path}: not a GGUF model file ({problem})"
NO_SUCH_MODEL = "{option} {path}: no such file"
MODEL_MISSING = "pins.yaml: equivalence.{key}.path: {path}: no such file; put the model there or fix the path"
MODEL_OTHER_FILE = "pins.yaml: equivalence.{key}: {path} has sha256 {sha256}, not {pinned}: another file than the release's"


def served_models(target: BuildUnderTest, options: GateOptions) -> tuple[Path, Path, str]:
    """The target and drafter a run serves, and which set they are: ``--model``/``--drafter``, else the release models
    pins.yaml names (each checked against its sha256), else the tiny generated ones (the near drafter)."""
    from ci.gates.tiny import models as tinymodels

    config = target.pins.equivalence
    if options.model is not None and options.drafter is not None:
        return options.model, options.drafter, GIVEN_MODELS
    if config.model is not None and config.drafter is not None:
        paths = []
        for key, ref in (("model", config.model), ("drafter", config.drafter)):
            path = target.root / ref.path
            if not path.is_file():
                raise ConfigError(MODEL_MISSING.format(key=key, path=ref.path))
            if ref.sha256 is not None and (digest := sha256_cached(path)) != ref.sha256:
                raise Refused(MODEL_OTHER_FILE.format(key=key, path=ref.path, sha256=digest[:12], pinned=ref.sha256[:12]))
            paths.append(path)
        return paths[0], paths[1], RELEASE_MODELS
    models = tinymodels.write_tiny_models(target.build.build_dir / "tiny-models")
    return models.target, models.near_drafter, TINY_MODELS


def gguf_architecture(path: Path) -> str:
    """``general.architecture`` of a GGUF file, read the way the launcher reads it (its header walk: gguf's own
    reader takes seconds over a large vocabulary); a :class:`ConfigError` naming the file otherwise."""
    from serve.errors import ServeError
    from serve.facts import read_facts

    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        return read_facts(str(path)).architecture
    except ServeError as exc:
        raise ConfigError(NOT_GGUF.format(path=path, problem=exc.problem)) from None


@dataclass(frozen=True)
class DrafterLaunch:
    """How a drafter is served beside its target: the launcher's own options, llama-server's after ``--``, the
    speculative type it runs, and the draft length set here (0: the launcher's)."""

    serve_options: tuple[str, ...]
    extra: tuple[str, ...]
    spec_type: str
    draft_max: int


def drafter_launch(drafter: Path, spec_type: str | None = None) -> DrafterLaunch:
    """A DFlash drafter through the launcher's ``--dflash`` (its route and recipes), an MTP head (``--spec-type
    draft-mtp``) through its ``--mtp``; any other drafter, or another ``--spec-type``, as ``-md`` plus the speculative
    args after ``--``."""
    if spec_type is None and gguf_architecture(drafter) == "dflash":
        return DrafterLaunch(("--dflash", str(drafter)), (), "draft-dflash", 0)
    if spec_type == MTP_SPEC_TYPE:
        return DrafterLaunch(("--mtp", str(drafter), "--mtp-max", str(MTP_DRAFT_MAX), "--mtp-p-min", "0"), (), MTP_SPEC_TYPE, MTP_DRAFT_MAX)
    kind = spec_type or DEFAULT_SPEC_TYPE
    return DrafterLaunch((), ("-md", str(drafter), "--spec-type", kind, *DRAFT_ARGS), kind, DRAFT_MAX)
