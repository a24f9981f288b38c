"""What a drafter leg's timings say, one formula for the equivalence gate, the perf gate and the bench (each reads it
here, beside the servers they share): how many drafted tokens the target accepted, and how many tokens each target
step yields.
"""

from __future__ import annotations

from collections.abc import Sequence

DRAFT_MAX_FLAGS = ("--spec-draft-n-max", "--draft-max", "--draft-n-max", "--draft")


def steps(predicted: int, drafted: int, accepted: int, draft_max: int = 0) -> int:
    """Target steps behind ``predicted`` generated tokens (0 when nothing was generated). llama-server reports no
    steps: a step yields its accepted drafts plus one token of its own, so there are ``predicted - accepted``; and it
    drafts at most ``draft_max``, so there are at least ``ceil(drafted / draft_max)``. The second bound matters at
    full acceptance, where the last step's own token lies past ``n_predict`` and the first alone gives 0."""
    if predicted <= 0:
        return 0
    least = -(-drafted // draft_max) if draft_max > 0 else 1
    return max(predicted - accepted, least, 1)


def tokens_per_step(predicted: int, drafted: int, accepted: int, draft_max: int = 0) -> float:
    """Generated tokens per target step: 1.0 without a drafter, up to ``draft_max + 1`` with a perfect one."""
    n = steps(predicted, drafted, accepted, draft_max)
    return predicted / n if n else 0.0


def acceptance(drafted: int, accepted: int) -> float:
    return accepted / drafted if drafted else 0.0


def draft_max_of(argv: Sequence[str]) -> int:
    """The draft length a llama-server command line sets (its last ``--spec-draft-n-max`` or alias), 0 when none."""
    found = 0
    for k, word in enumerate(argv):
        flag, eq, value = word.partition("=")
        if flag not in DRAFT_MAX_FLAGS:
            continue
        text = value if eq else (argv[k + 1] if k + 1 < len(argv) else "")
        if text.isdigit():
            found = int(text)
    return found
