"""What a build was made from, as the launcher can check it without the orchestration: the pinned commit in
pins.yaml and the patch series' digest (the same digest ``ci.source.series`` puts in the build key)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from serve.bounded import CONFIG_LIMIT, read_regular, read_text

SERIES = Path("patches") / "series"

# Messages, shared with the tests that match on them (tests/support/messages.py)
PIN_MOVED = "pins.yaml (the pin is {pinned}, the build's {built})"
SERIES_MOVED = "patches/ (the series is {current}, the build's {built})"


def series_entries(text: str) -> list[tuple[int, str]]:
    """The patch names a series file lists, each with its line number: blank lines and ``#`` comments skipped."""
    return [(n, line) for n, raw in enumerate(text.splitlines(), 1) if (line := raw.strip()) and not line.startswith("#")]


def series_digest(patches: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over the series in order: each patch's name and the sha256 of its bytes."""
    h = hashlib.sha256()
    for name, data in patches:
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def staleness(root: Path, pin: object, digest: object) -> str | None:
    """Why a build recorded with ``pin`` and series ``digest`` no longer matches ``root``'s pins.yaml and
    patches/; None when it matches. What cannot be read here is named, never taken as a match."""
    import yaml  # here, not at the top: only a launch from a build reads pins.yaml, and the import costs 30 ms

    try:
        doc = yaml.safe_load(read_text(root / "pins.yaml", CONFIG_LIMIT))
        pinned = doc["fork"]["commit"]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError, RecursionError):
        return "pins.yaml, which cannot be read here"
    if pinned != pin:
        return PIN_MOVED.format(pinned=str(pinned)[:7], built=str(pin)[:7])
    try:
        series = root / SERIES
        names = [name for _, name in series_entries(read_text(series, CONFIG_LIMIT))] if series.is_file() else []
        current = series_digest((n, read_regular(root / "patches" / n, CONFIG_LIMIT)) for n in names)
    except (OSError, UnicodeDecodeError):
        return "patches/, which cannot be read here"
    if current != digest:
        return SERIES_MOVED.format(current=current[:12], built=str(digest)[:12])
    return None
