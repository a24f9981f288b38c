"""The errors of ``1bit serve``: its own small family, so that serve/ ships without ci/.

Only :func:`serve.cli.main` catches these; it prints one line, ``1bit serve: error: <where>: <problem>``,
and exits with the class's code. Each is one line of visible characters (:func:`printable`), whatever a file put in it.
"""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable

# Messages, shared with the tests that match on them (tests/support/messages.py)
AT = "{where}: {problem}"  # a problem and the file, flag or variable it is about
DID_YOU_MEAN = ' (did you mean "{choice}"?)'
NOT_INSTALLED = (  # python -m serve by a Python without the launcher's packages
    "1bit serve: error: {problem}, for {python}; run it with the project's environment (made by any nox session): "
    ".nox/onebit/bin/python -m serve, or `source .nox/onebit/bin/activate` and then 1bit"
)
NO_SUCH_FILE = "no such file"  # a FileProblem's, for a GGUF or a recipes file alike
NOT_A_FILE = "is {kind}, not {what}"  # kind: serve.bounded's (a directory, a FIFO, ...); what: one of the three below
A_GGUF_FILE = "a GGUF file"  # what -m, --dflash and --mtp name
A_RECIPES_FILE = "a recipes file"  # what --recipes names
LLAMA_SERVER = "llama-server"  # what --llama-server names
FLAG_PATH = "{flag} {path}"  # the where of a problem with the path a flag gave


class ServeError(Exception):
    """Something the user can act on; ``where`` names the file, flag or variable, the message says what to do."""

    exit_code = 1

    def __init__(self, message: str, where: str | None = None) -> None:
        # one line of visible characters, whatever a file put in it (a GGUF key, a recipes file's key, a path)
        message, where = printable(message), printable(where) if where is not None else None
        super().__init__(AT.format(where=where, problem=message) if where else message)
        self.where = where
        self.problem = message

    @property
    def line(self) -> str:
        return str(self)


class UsageError(ServeError):
    """A flag or an environment variable has a value serve cannot use."""

    exit_code = 2


class FileProblem(ServeError):
    """A file is missing, unreadable or malformed: a GGUF, a recipes file, a build manifest."""

    exit_code = 2


class Refused(ServeError):
    """Understood but wrong to do: a rotated file on Vulkan, two drafters, a replaced llama-server binary."""

    exit_code = 4


class NoServer(ServeError):
    """No llama-server to run: no build for the profile, or the one named is not there."""

    exit_code = 5


class NoBuild(NoServer):
    """The profile has no build manifest yet: a dry run notes it, a launch stops."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean "x"?)`` for the closest choice, or nothing."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return DID_YOU_MEAN.format(choice=close[0]) if close else ""


# what a terminal acts on, or str.splitlines splits at: controls (C0, DEL, C1), format characters (the bidirectional
# overrides that reorder what is shown, zero-width ones), line and paragraph separators, and lone surrogates
_UNPRINTABLE = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on escaped as Python writes it (``\\x1b``, ``\\n``,
    ``\\u202e``): a string read from a file (a GGUF's architecture or keys, a recipes file's keys) reaches the
    terminal as one line of visible characters."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch != " " and unicodedata.category(ch) in _UNPRINTABLE:
            out.append(repr(ch)[1:-1] if ch not in "'\"" else ch)
        else:
            out.append(ch)
    return "".join(out)
