"""The perf claims pins.yaml declares (``expect.perf``): ``METRIC(CONFIG[, PROMPT]) [/ METRIC(CONFIG[, PROMPT])] >=
FLOOR``, parsed when pins.yaml loads. They belong to the pin: the perf gate (:mod:`ci.gates.perf.judge`) measures and
judges them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ci.errors import ConfigError

CONFIGS = ("base", "draft")
# prompt and decode in t/s, ttft in seconds (a request of one token), bandwidth as a share of the device's peak
METRICS = ("prompt", "decode", "tokens_per_step", "acceptance", "ttft", "bandwidth")
_TERM = r"(?P<m{n}>[a-z_]+)\(\s*(?P<c{n}>[a-z][a-z0-9_]*)\s*(?:,\s*(?P<p{n}>[a-z0-9]+)\s*)?\)"
CHECK_RE = re.compile(rf"^\s*{_TERM.format(n=1)}\s*(?:/\s*{_TERM.format(n=2)}\s*)?>=\s*(?P<floor>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*$")

# Messages, shared with the tests that match on them (tests/support/messages.py)
BAD_TOLERANCE = "{where}: tolerance {tolerance}: must be a fraction from 0 to 1 (0.1: a 10% drop fails)"
NOT_A_CHECK = '{where}: "{text}" is not METRIC(CONFIG[, PROMPT]) [/ METRIC(CONFIG[, PROMPT])] >= NUMBER'
NOT_A_METRIC = '{where}: "{metric}" is not a metric: {metrics}'
NOT_A_CONFIG = '{where}: "{config}" is not a config: {configs}'


@dataclass(frozen=True)
class Term:
    metric: str
    config: str
    prompt: str | None  # None: the long prompt for "prompt", every decode prompt pooled otherwise

    def show(self) -> str:
        return f"{self.metric}({self.config}{', ' + self.prompt if self.prompt else ''})"


@dataclass(frozen=True)
class Check:
    text: str
    top: Term
    bottom: Term | None
    floor: float
    measured: str  # where the floor comes from, as recipes say it
    tolerance: float = 0.1  # the drop against the last release that fails it

    @property
    def name(self) -> str:
        return self.top.show() + (f" / {self.bottom.show()}" if self.bottom else "")


def parse_check(text: str, measured: str, tolerance: float, where: str, configs: Sequence[str] = CONFIGS) -> Check:
    if not 0.0 <= tolerance <= 1.0:  # NaN fails both: a NaN or a tolerance above 1 turned the regression check off
        raise ConfigError(BAD_TOLERANCE.format(where=where, tolerance=tolerance))
    m = CHECK_RE.match(text)
    if not m:
        raise ConfigError(NOT_A_CHECK.format(where=where, text=text))
    terms = []
    for n in ("1", "2"):
        if m.group(f"m{n}") is None:
            continue
        term = Term(m.group(f"m{n}"), m.group(f"c{n}"), m.group(f"p{n}"))
        if term.metric not in METRICS:
            raise ConfigError(NOT_A_METRIC.format(where=where, metric=term.metric, metrics=", ".join(METRICS)))
        if term.config not in configs:
            raise ConfigError(NOT_A_CONFIG.format(where=where, config=term.config, configs=", ".join(configs)))
        terms.append(term)
    if not measured.strip():
        raise ConfigError(f"{where}: has no measured: say where the floor comes from (a PR, a run and its command)")
    return Check(text.strip(), terms[0], terms[1] if len(terms) > 1 else None, float(m.group("floor")), measured, tolerance)
