"""What the route tests share: one ``1bit serve --dry-run`` parsed, and serve's error prefix."""

from __future__ import annotations

from dataclasses import dataclass

from serve.cli import ERROR, RECIPE_APPLIED, SERVE
from tests.support.messages import pattern

ERROR_PREFIX = ERROR.format(prog=SERVE, problem="")  # what comes before the problem on serve's one error line


@dataclass(frozen=True)
class DryRun:
    argv: list[str]
    env: dict[str, str]
    notes: list[str]
    recipes: list[str]
    stderr: str

    @property
    def args(self) -> list[str]:
        """argv without the program."""
        return self.argv[1:]

    def recipe_lines(self) -> list[str]:
        applied = pattern(RECIPE_APPLIED)
        return [line for line in self.stderr.splitlines() if applied.match(line)]
