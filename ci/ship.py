"""``nox -s ship``: the serve launcher ships only when every gate passed for exactly the build being shipped.

The current build key is computed from what is here now (pins.yaml, the patch series, the profile, the
toolchain), not read from the manifest: a bump or a patch edited after the gates ran makes their records stale.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci import ledger as ledger_mod
from ci.build import BuildRequest, Manifest, current_build
from ci.errors import CommandFailed, GateFailed
from ci.files import write_atomic
from ci.project import Project

REQUIRED_GATES = ("route", "backend_ops", "equivalence")
DIST_NAME = "onebit-serve"


@dataclass(frozen=True)
class GateStanding:
    gate: str
    state: str  # "passed", "failed", "missing", "stale"
    detail: str
    record: ledger_mod.Record | None = None


@dataclass(frozen=True)
class ShipCheck:
    key: str
    manifest: Manifest
    standings: tuple[GateStanding, ...]

    @property
    def ok(self) -> bool:
        return all(s.state == "passed" for s in self.standings)


def check(project: Project, request: BuildRequest, results_dir: Path) -> ShipCheck:
    manifest, key = current_build(project, request)
    ledger = ledger_mod.read(ledger_mod.ledger_path(results_dir))
    standings = []
    for gate in REQUIRED_GATES:
        rec = ledger_mod.latest(ledger, gate, key)
        if rec is not None:
            state = "passed" if rec.verdict == "passed" else "failed"
            problems = list(rec.data.get("problems", []))
            why = f": {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "") if state == "failed" and problems else ""
            detail = f"{rec.data.get('summary', '')}{why} (ledger line {rec.line}, {rec.data.get('time', '')})"
            standings.append(GateStanding(gate, state, detail, rec))
            continue
        others = [r for r in ledger.records if r.gate == gate]
        if others:
            last = others[-1]
            standings.append(GateStanding(gate, "stale", f"no record for this build; the last ({last.verdict}, line {last.line}) judged key {last.build_key[:12] or 'none'}"))
        else:
            standings.append(GateStanding(gate, "missing", "no record: run nox -s gpu_tests"))
    return ShipCheck(key, manifest, tuple(standings))


def table(result: ShipCheck) -> str:
    width = max(len(g) for g in REQUIRED_GATES)
    lines = [f"ship: build {result.key[:12]} ({result.manifest.profile}, pin {result.manifest.pin['commit'][:7]}, patches {result.manifest.patches['digest'][:12]})"]
    for s in result.standings:
        lines.append(f"  {s.gate:<{width}}  {s.state.upper() if s.state != 'passed' else 'passed':<8}  {s.detail}")
    return "\n".join(lines)


def release_manifest(project: Project, result: ShipCheck, results_dir: Path) -> dict[str, Any]:
    pins = project.load_pins()
    m = result.manifest
    return {
        "schema": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pin": {"url": pins.fork.url, "branch": pins.fork.branch, "commit": pins.fork.commit, "reference": pins.fork.reference},
        "patches": m.patches,
        "build": {
            "key": m.key,
            "profile": m.profile,
            "device": m.device,
            "flags": list(m.flags),
            "toolchain": m.toolchain,
            "binaries": {k: a.sha256 for k, a in m.binaries.items()},
        },
        "gates": {
            s.gate: {
                "verdict": s.state,
                "counts": s.record.data.get("counts", {}) if s.record else {},
                "summary": s.record.data.get("summary", "") if s.record else "",
                "ledger_line": s.record.line if s.record else None,
                "record_sha256": s.record.sha256 if s.record else None,
                "time": s.record.data.get("time") if s.record else None,
            }
            for s in result.standings
        },
        "ledger": str(ledger_mod.ledger_path(results_dir).relative_to(project.root))
        if ledger_mod.ledger_path(results_dir).is_relative_to(project.root)
        else str(ledger_mod.ledger_path(results_dir)),
    }


PYPROJECT = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "1bit serve: llama-server launcher for the ROCmFPX fork, shipped with the evidence of its gates"
requires-python = ">=3.10"
dependencies = ["gguf>=0.10"]

[project.scripts]
1bit = "serve.cli:main"

[tool.setuptools]
packages = {packages}

[tool.setuptools.package-data]
serve = ["config/*.json", "release.json"]
"""


def build_distribution(project: Project, manifest: dict[str, Any], dist: Path, base_version: str) -> list[Path]:
    """Wheel and sdist of the serve launcher with the release manifest inside and beside them."""
    version = f"{base_version}+{manifest['pin']['commit'][:7]}.{manifest['build']['key'][:8]}"
    with tempfile.TemporaryDirectory(prefix="onebit-ship-") as tmp:
        stage = Path(tmp)
        import serve

        shutil.copytree(Path(serve.__file__).parent, stage / "serve", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        (stage / "serve" / "release.json").write_text(json.dumps(manifest, indent=2) + "\n")
        packages = sorted(str(p.parent.relative_to(stage)).replace("/", ".") for p in (stage / "serve").rglob("__init__.py"))
        (stage / "pyproject.toml").write_text(PYPROJECT.format(name=DIST_NAME, version=version, packages=json.dumps(packages)))
        out = stage / "dist"
        argv = [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(out), str(stage)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise CommandFailed(argv, done.returncode, (done.stdout + done.stderr)[-4000:], what="python -m build")
        dist.mkdir(parents=True, exist_ok=True)
        built = []
        for f in sorted(out.iterdir()):
            target = dist / f.name
            shutil.copy2(f, target)
            built.append(target)
    stem = f"{DIST_NAME.replace('-', '_')}-{version}"
    release = dist / f"{stem}.release.json"
    write_atomic(release, json.dumps(manifest, indent=2) + "\n")
    return [*built, release]


def refusal(result: ShipCheck) -> GateFailed:
    bad = [s for s in result.standings if s.state != "passed"]
    return GateFailed(f"ship: refused: {len(bad)} of {len(REQUIRED_GATES)} gates have not passed for this build ({', '.join(s.gate for s in bad)})")


def ship(project: Project, result: ShipCheck, results_dir: Path, dist: Path) -> list[Path]:
    """Build the distribution for a passing ``result`` (a refused one raises)."""
    from importlib import metadata

    if not result.ok:
        raise refusal(result)
    manifest = release_manifest(project, result, results_dir)
    try:
        base = metadata.version("onebit-ci")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed (a GPU box, --no-venv)
        import re

        from ci.gates import SOURCE_ROOT

        m = re.search(r'^version = "([^"]+)"', (SOURCE_ROOT / "pyproject.toml").read_text(), re.MULTILINE)
        base = m.group(1) if m else "0.0.0"
    return build_distribution(project, manifest, dist, base)
