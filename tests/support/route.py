"""What the route tests share: one ``1bit serve --dry-run`` parsed, and serve's error prefix."""

from __future__ import annotations

from dataclasses import dataclass

ERROR_PREFIX = "1bit serve: error: "


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
        return [line for line in self.stderr.splitlines() if line.startswith("1bit serve: recipe ")]
