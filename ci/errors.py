"""The one error family of onebit-ci.

Only the entry points catch these; each prints one line and exits with its class's code.
"""

from __future__ import annotations

from collections.abc import Sequence

# Messages, shared with the tests that match on them (tests/support/messages.py)
EXITED = "{program} exited with {status}"
STATUS = "status {code}"  # an exit status in words (describe_returncode)
KILLED_BY = "{name} (killed by signal {number})"


class OnebitError(Exception):
    """Something the user can act on; the message names the file, key, commit or command."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(OnebitError):
    """A file or an argument is malformed (pins.yaml, .gitmodules, a patch header, a CLI flag)."""

    exit_code = 2


class GitError(OnebitError):
    """A repository could not be read, fetched or resolved."""

    exit_code = 3


class Refused(OnebitError):
    """The request is understood but unsafe: a rollback, a conflicting patch, a stale build."""

    exit_code = 4


class ToolchainError(OnebitError):
    """A compiler, ROCm, CMake or Ninja is missing or too old."""

    exit_code = 5


class CommandFailed(OnebitError):
    """An external program exited non-zero; carries its argv, exit code and the tail of its output."""

    exit_code = 6

    def __init__(self, argv: Sequence[str], returncode: int, tail: str, what: str | None = None) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.tail = tail
        name = what or self.argv[0]
        super().__init__(EXITED.format(program=name, status=describe_returncode(returncode)))


class GateFailed(OnebitError):
    """A gate ran and did not pass."""

    exit_code = 7


def describe_returncode(returncode: int) -> str:
    """Exit status in words: a negative code is the signal that killed the process."""
    if returncode < 0:
        import signal

        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return KILLED_BY.format(name=name, number=-returncode)
    if returncode > 128:
        import signal

        try:
            return f"status {returncode} ({signal.Signals(returncode - 128).name}?)"
        except ValueError:
            pass
    return STATUS.format(code=returncode)


class ServerFailed(OnebitError):
    """A llama-server did not come up, died, timed out or answered an HTTP error; carries its log's tail."""

    exit_code = 8

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail
