"""The prompts the gates send: a :class:`Prompt`, and the committed set (ci/prompts) or a folder's ``*.txt`` files,
read once by :func:`load_prompts` for the equivalence gate, the perf gate and the bench alike."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ci.errors import ConfigError
from serve.bounded import CONFIG_LIMIT, read_text

# Messages, shared with the tests that match on them (tests/support/messages.py)
PROMPT_NOT_UTF8 = "--prompts: {path}: not UTF-8 text (byte 0x{byte:02x}); a prompt is UTF-8 text"
NO_PROMPTS = "{where}: no *.txt prompt files"
EMPTY_PROMPT = "{where}/{name}.txt: the prompt is empty"


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str


def load_prompts(directory: Path | None = None) -> tuple[Prompt, ...]:
    """The ``*.txt`` files of ``directory`` (default: the committed ci/prompts), by name; each one prompt."""
    if directory is None:
        files = [(f.name, f.read_text(encoding="utf-8")) for f in resources.files("ci").joinpath("prompts").iterdir() if f.name.endswith(".txt")]
    else:
        if not directory.is_dir():
            raise ConfigError(f"--prompts {directory}: not a directory")
        files = []
        for f in sorted(directory.iterdir()):
            if f.suffix != ".txt":
                continue
            try:
                files.append((f.name, read_text(f, CONFIG_LIMIT)))  # each a regular file of bounded size
            except UnicodeDecodeError as exc:
                raise ConfigError(PROMPT_NOT_UTF8.format(path=f, byte=exc.object[exc.start])) from None
    prompts = tuple(Prompt(name.removesuffix(".txt"), text) for name, text in sorted(files))
    where = directory or "ci/prompts"
    if not prompts:
        raise ConfigError(NO_PROMPTS.format(where=where))
    for p in prompts:
        if not p.text.strip():
            raise ConfigError(EMPTY_PROMPT.format(where=where, name=p.name))
    return prompts
