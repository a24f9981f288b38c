"""A model set's files, written where the gate runs and cached by each model's spec hash: the first call writes them
(minutes for the real set), a later one finds them by name. Never committed; the cache folder is
``$ONEBIT_SHAPES_CACHE``, else the user's cache (``~/.cache/onebit-ci/shapes``).

A file's name holds its model's hash (the set's seed, the vocabulary, the model's shape and type, the writer's
version), and a file is only ever renamed into place whole, so a file of that name is that model. Writing a set
removes its earlier specs' files (a stale 15 GB target would fill a 64 GB disk).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ci.errors import ConfigError
from ci.files import cache_dir
from ci.gates.shapes import layout, spec
from ci.gates.shapes.bandwidth import decode_bytes
from ci.gates.shapes.stream import write_gguf
from ci.gates.shapes.vocab import MASK, add_real_vocab, real_vocab
from ci.gates.tiny.dflash import add_dflash_keys
from ci.gates.tiny.qwen35 import add_qwen35_keys
from ci.locks import held_lock

CACHE_VAR = "ONEBIT_SHAPES_CACHE"
TARGET, DRAFTER, MOE = "target", "drafter", "moe"
ROLES = (TARGET, DRAFTER, MOE)
# gguf.LlamaFileType: the general.file_type of each quant type's files
FILE_TYPES = {"Q4_0": 2, "Q8_0": 7}

# Messages, shared with the tests that match on them (tests/support/messages.py)
UNKNOWN_SET = "model set {name!r}: there is none of that name{hint}; the sets: {known}"
UNKNOWN_ROLE = "model role {role!r}: the roles are {known}"
WROTE = "shapes: {file}: {gigabytes:.2f} GB in {seconds:.1f} s"
CACHED = "shapes: {file}: cached"
MODEL_LINE = "{file}: {gigabytes:.2f} GB, {per_token:.2f} GB read per decoded token"


def shapes_cache() -> Path:
    """Where the sets are kept: ``$ONEBIT_SHAPES_CACHE``, else ``shapes`` in onebit-ci's cache folder."""
    given = os.environ.get(CACHE_VAR)
    return Path(given) if given else cache_dir() / "shapes"


def shape_set(name: str) -> spec.ShapeSet:
    """The set named ``name`` (``real`` or ``reduced``); a name that is none is one clear line."""
    if name in spec.SETS:
        return spec.SETS[name]
    close = difflib.get_close_matches(name, spec.SETS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(UNKNOWN_SET.format(name=name, hint=hint, known=", ".join(spec.SETS)))


@dataclass(frozen=True)
class ModelFile:
    """One model of a set, as it will be written: its file name (with its hash), role and how to write it."""

    role: str
    file: str
    digest: str
    write: Callable[[Path, int | None], Path]


def _digest(s: spec.ShapeSet, role: str, shape: object, kinds: Sequence[str]) -> str:
    value = {"writer": spec.WRITER_VERSION, "seed": s.seed, "vocab": s.vocab_size, "role": role, "shape": dataclasses.asdict(shape), "types": list(kinds)}  # type: ignore[call-overload]
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def model_files(s: spec.ShapeSet) -> dict[str, ModelFile]:
    """The set's models by role, pure: their file names and writers."""
    v = real_vocab(s.vocab_size)
    silent = v.silent()

    def target(shape: spec.Qwen35Shape, role: str, index: int) -> ModelFile:
        digest = _digest(s, role, shape, (s.target_type, s.output_type))
        plans = layout.qwen35_plan(shape, s.vocab_size, s.target_type, s.output_type, silent)

        def keys(w: object) -> None:
            add_qwen35_keys(
                w,
                shape.arch,
                context=shape.context,
                dim=shape.dim,
                blocks=shape.layers,
                ff=shape.ff or shape.expert_ff,
                heads=shape.heads,
                heads_kv=shape.heads_kv,
                head_dim=shape.head_dim,
                rope_dim=shape.rope_dim,
                rope_sections=shape.rope_sections,
                full_attention_interval=shape.full_attention_interval,
                conv_kernel=shape.conv_kernel,
                state=shape.head_state,
                k_heads=shape.k_heads,
                v_heads=shape.v_heads,
                rope_base=shape.rope_base,
            )
            if shape.experts:
                a = shape.arch
                w.add_uint32(f"{a}.expert_count", shape.experts)  # type: ignore[attr-defined]
                w.add_uint32(f"{a}.expert_used_count", shape.experts_used)  # type: ignore[attr-defined]
                w.add_uint32(f"{a}.expert_feed_forward_length", shape.expert_ff)  # type: ignore[attr-defined]
                w.add_uint32(f"{a}.expert_shared_feed_forward_length", shape.shared_ff)  # type: ignore[attr-defined]
            add_real_vocab(w, v)

        def write(path: Path, jobs: int | None) -> Path:
            return write_gguf(path, shape.arch, shape.name, FILE_TYPES[s.target_type], keys, plans, (s.seed, index), jobs)

        return ModelFile(role, f"{shape.name}-{s.target_type}-{digest[:12]}.gguf", digest, write)

    d = s.drafter
    d_digest = _digest(s, DRAFTER, d, (s.drafter_type,))
    d_plans = layout.dflash_plan(d, s.drafter_type)

    def d_keys(w: object) -> None:
        add_dflash_keys(
            w,
            context=d.context,
            dim=d.dim,
            layers=d.layers,
            ff=d.ff,
            heads=d.heads,
            heads_kv=d.heads_kv,
            head_dim=d.head_dim,
            target_layers=d.target_layers,
            target_dim=d.target_dim,
            block_size=d.block_size,
            mask_token_id=v.id(MASK),
            rope_base=d.rope_base,
        )
        add_real_vocab(w, v)

    def d_write(path: Path, jobs: int | None) -> Path:
        return write_gguf(path, spec.DFLASH, d.name, FILE_TYPES[s.drafter_type], d_keys, d_plans, (s.seed, 1), jobs)

    return {
        TARGET: target(s.target, TARGET, 0),
        DRAFTER: ModelFile(DRAFTER, f"{d.name}-{s.drafter_type}-{d_digest[:12]}.gguf", d_digest, d_write),
        MOE: target(s.moe, MOE, 2),
    }


@dataclass(frozen=True)
class ModelSetFiles:
    """A written set: its folder and its models' files by role."""

    name: str
    folder: Path
    files: Mapping[str, Path]

    def __getitem__(self, role: str) -> Path:
        return self.files[role]

    @property
    def target(self) -> Path:
        return self.files[TARGET]

    @property
    def drafter(self) -> Path:
        return self.files[DRAFTER]

    @property
    def moe(self) -> Path:
        return self.files[MOE]

    def describe(self) -> str:
        """One line per model: its size and the weight bytes a decoded token reads (:mod:`ci.gates.shapes.bandwidth`)."""
        lines = []
        for path in self.files.values():
            b = decode_bytes(path)
            lines.append(MODEL_LINE.format(file=path.name, gigabytes=path.stat().st_size / 1e9, per_token=b.per_token / 1e9))
        return "\n".join(lines)


def _present(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def write_set(
    name: str | spec.ShapeSet,
    out: Path | None = None,
    *,
    roles: Sequence[str] = ROLES,
    jobs: int | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> ModelSetFiles:
    """The set ``name``'s models ``roles`` in ``out/NAME`` (default: :func:`shapes_cache`), written if missing; other
    ``.gguf`` files there (an earlier spec's) are removed. ``jobs`` threads write (default: one per core). ``name`` is
    a set's name (``real``, ``reduced``) or a :class:`~ci.gates.shapes.spec.ShapeSet`."""
    s = shape_set(name) if isinstance(name, str) else name
    for role in roles:
        if role not in ROLES:
            raise ConfigError(UNKNOWN_ROLE.format(role=role, known=", ".join(ROLES)))
    folder = (out if out is not None else shapes_cache()) / s.name
    models = model_files(s)
    wanted = {role: folder / models[role].file for role in roles}
    if all(_present(p) for p in wanted.values()):
        return ModelSetFiles(s.name, folder, wanted)
    folder.mkdir(parents=True, exist_ok=True)
    with held_lock(folder / ".lock", "shapes", f"the model folder {folder}", wait=True, say=say):
        keep = {m.file for m in models.values()}
        for old in folder.glob("*.gguf"):
            if old.name not in keep:
                old.unlink()
        for left in folder.glob(".*.gguf.*"):  # a writer killed mid-file leaves its temporary folder
            if left.is_dir() and not left.is_symlink():
                shutil.rmtree(left)
        for role, path in wanted.items():
            if _present(path):
                say(CACHED.format(file=path.name))
                continue
            t0 = time.monotonic()
            models[role].write(path, jobs)
            say(WROTE.format(file=path.name, gigabytes=path.stat().st_size / 1e9, seconds=time.monotonic() - t0))
    return ModelSetFiles(s.name, folder, wanted)
