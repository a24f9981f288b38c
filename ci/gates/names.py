"""The gates' names, each written once: the registry (:mod:`ci.gates.registry`), the gate modules, pins.yaml's
release.require, the ledger and ship all use these. A light module: resolving a job imports it, not the gates."""

from __future__ import annotations

ROUTE = "route"
BACKEND_OPS = "backend_ops"
EQUIVALENCE = "equivalence"
ARCHS = "archs"
PERF = "perf"
SELFTEST = "gate_selftest"
