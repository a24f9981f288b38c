"""llama-server's flag spellings, so that "the command line already has it" counts every alias.

A command line is read as units: a flag and the values up to the next flag. A flag is ``-x`` or ``--xy``
(``--xy=v`` included), never a negative number such as ``-1``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

# Spellings of one llama-server option (upstream common/arg.cpp and the ROCmFPX fork); the first is canonical.
# A switch and its negation are one option here: a user's --no-jinja replaces serve's --jinja.
ALIAS_GROUPS: tuple[tuple[str, ...], ...] = (
    ("-m", "--model"),
    ("-dev", "--device"),
    ("-ngl", "--gpu-layers", "--n-gpu-layers"),
    ("-fa", "--flash-attn"),
    ("--jinja", "--no-jinja"),
    ("-c", "--ctx-size"),
    ("--host",),
    ("--port",),
    ("-b", "--batch-size"),
    ("-ub", "--ubatch-size"),
    ("-t", "--threads"),
    ("-tb", "--threads-batch"),
    ("-np", "--parallel"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-ot", "--override-tensor"),
    ("-sm", "--split-mode"),
    ("-ts", "--tensor-split"),
    ("-mg", "--main-gpu"),
    ("-mm", "--mmproj"),
    ("-a", "--alias"),
    ("--spec-type",),
    ("-md", "--model-draft", "--spec-draft-model"),
    ("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl"),
    ("-devd", "--device-draft"),
    ("-cd", "--ctx-size-draft"),
    ("--spec-draft-n-max", "--draft-max", "--draft-n", "--draft-n-max"),
    ("--spec-draft-n-min", "--draft-min", "--draft-n-min"),
    ("--spec-draft-p-min", "--draft-p-min"),
)
_CANONICAL = {spelling: group[0] for group in ALIAS_GROUPS for spelling in group}


def is_flag(token: str) -> bool:
    return len(token) > 1 and token[0] == "-" and not token[1].isdigit() and token[1] != "."


def canonical(flag: str) -> str:
    """The one spelling of ``flag`` (``--ubatch-size=512`` -> ``-ub``); an unknown flag is its own."""
    name = flag.split("=", 1)[0] if flag.startswith("--") else flag
    return _CANONICAL.get(name, name)


def units(args: Sequence[str]) -> list[tuple[str, ...]]:
    """``["-ub", "1024", "--jinja"]`` -> ``[("-ub", "1024"), ("--jinja",)]``; leading values form their own unit."""
    out: list[list[str]] = []
    for token in args:
        if is_flag(token) or not out:
            out.append([token])
        else:
            out[-1].append(token)
    return [tuple(u) for u in out]


def flags_in(args: Iterable[str]) -> set[str]:
    """The canonical flags a command line has."""
    return {canonical(t) for t in args if is_flag(t)}


# Flags that change where llama-server listens, what it loads (and from where) or where it writes (upstream
# common/arg.cpp, the server's options): a recipe never gives one (serve.recipes.args_problem). serve's own -m,
# --host and --port are given by serve; the rest only by the user, after --.
LAUNCH_SHAPING: frozenset[str] = frozenset(
    (
        # where it listens, and who may talk to it
        "--host", "--port", "--reuse-port", "--path", "--api-prefix", "--api-key", "--api-key-file",
        "--ssl-key-file", "--ssl-cert-file", "--webui", "--no-webui",
        # what it loads, and from where
        "-m", "--model", "-mu", "--model-url", "-dr", "--docker-repo", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file",
        "-hfv", "-hfrv", "--hf-repo-v", "-hffv", "--hf-file-v", "-hft", "--hf-token", "-hfd", "-hfrd", "--hf-repo-draft",
        "-md", "--model-draft", "--spec-draft-model", "-mv", "--model-vocoder", "-mm", "--mmproj", "-mmu", "--mmproj-url",
        "--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled", "--rpc", "--chat-template-file",
        "--grammar-file", "-jf", "--json-schema-file", "-f", "--file", "-bf", "--binary-file", "--models-dir",
        "--models-preset", "--media-path", "--tools",
        # where it writes
        "--log-file", "--slot-save-path", "-lcs", "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic",
        "--prompt-cache", "-o", "--output", "--output-file",
    )
)  # fmt: skip


def shapes_launch(flag: str) -> bool:
    """Whether ``flag`` (any spelling, ``--x=v`` included) is one of :data:`LAUNCH_SHAPING`."""
    name = flag.split("=", 1)[0] if flag.startswith("--") else flag
    return name in LAUNCH_SHAPING or canonical(name) in LAUNCH_SHAPING


# Options whose (first) value is a file or directory: a gated llama-server runs in a private directory, so serve
# makes these absolute against the directory the user ran it in (serve's own -m and -md, and yours after --).
PATH_VALUED: frozenset[str] = frozenset(
    (
        "-m", "--model", "-md", "--model-draft", "--spec-draft-model", "-mv", "--model-vocoder", "-mm", "--mmproj",
        "--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled", "--chat-template-file",
        "--grammar-file", "-jf", "--json-schema-file", "-f", "--file", "-bf", "--binary-file", "--log-file",
        "--slot-save-path", "-lcs", "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic", "--path",
        "--ssl-key-file", "--ssl-cert-file", "--api-key-file", "--models-dir", "--models-preset", "--media-path",
        "--prompt-cache", "-o", "--output", "--output-file",
    )
)  # fmt: skip


def absolute_paths(args: Sequence[str], cwd: str) -> list[str]:
    """``args`` with the value of each :data:`PATH_VALUED` option made absolute against ``cwd`` (``--x=v`` too)."""
    out: list[str] = []
    take = False
    for token in args:
        if take:
            out.append(_absolute(token, cwd))
            take = False
            continue
        if is_flag(token) and token.startswith("--") and "=" in token:
            name, value = token.split("=", 1)
            out.append(f"{name}={_absolute(value, cwd)}" if (name in PATH_VALUED or canonical(name) in PATH_VALUED) else token)
            continue
        take = is_flag(token) and (token in PATH_VALUED or canonical(token) in PATH_VALUED)
        out.append(token)
    return out


def _absolute(value: str, cwd: str) -> str:
    if not value or value.startswith("/") or "://" in value:
        return value
    return os.path.join(cwd, value)
