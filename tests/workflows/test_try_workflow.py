"""try.yml (a fork PR gated on the GPU runners, dispatched with its number) and pages.yml (the report published),
checked as the other workflows are: the workflow schema, zizmor's offline audits, and what they must hold."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.workflows.test_workflows import ROOT, check_schema, load, zizmor

OURS = [ROOT / ".github" / "workflows" / name for name in ("try.yml", "pages.yml")]
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def uses(workflow: dict[Any, Any]) -> list[str]:
    found = []
    for job in workflow["jobs"].values():
        if "uses" in job:
            found.append(job["uses"])
        found += [s["uses"] for s in job.get("steps", []) if "uses" in s]
    return found


def test_they_follow_the_schema_and_zizmor_finds_nothing() -> None:
    done = check_schema(*OURS)
    assert done.returncode == 0, done.stdout + done.stderr
    audited = zizmor(*OURS)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "No findings to report" in audited.stdout + audited.stderr


def test_every_action_is_pinned_by_commit_as_ci_yml_pins_it() -> None:
    ci = {u.split("@")[0]: u for u in uses(load("ci.yml"))}
    for path in OURS:
        for u in uses(yaml.safe_load(path.read_text())):
            if u.startswith("./"):
                continue  # this repository's own reusable workflow, at the caller's commit
            assert PINNED.match(u), u
            assert ci.get(u.split("@")[0], u) == u, f"{u} is pinned otherwise in ci.yml"


def test_try_is_dispatched_with_the_prs_number_and_posts_with_a_token_for_the_fork_alone() -> None:
    wf = load("try.yml")
    inputs = wf[True]["workflow_dispatch"]["inputs"]  # PyYAML reads the key "on" as True
    assert inputs["pr"]["required"] is True
    assert inputs["pr"]["type"] == "number"
    assert set(inputs) == {"pr", "profiles", "fork_url"}
    assert wf["permissions"] == {}
    jobs = wf["jobs"]
    for name in ("plan", "try"):
        assert jobs[name]["permissions"] == {"contents": "read"}, name
    gated = jobs["try"]
    assert gated["runs-on"] == "${{ matrix.runs-on }}"  # the profile's self-hosted GPU runner, as ci.yml's gpu job
    steps = {s.get("name", s.get("uses", "")): s for s in gated["steps"]}
    (app,) = [s for s in gated["steps"] if str(s.get("uses", "")).startswith("actions/create-github-app-token@")]
    assert app["with"]["permission-statuses"] == "write"
    assert app["with"]["permission-pull-requests"] == "write"
    assert not any(k.startswith("permission-") and k not in ("permission-statuses", "permission-pull-requests") for k in app["with"])
    run = steps["nox -s try"]
    assert run["env"]["GITHUB_TOKEN"] == f"${{{{ steps.{app['id']}.outputs.token }}}}"
    assert run["run"].startswith('exec nox -s try -- "pull/$PR" --profile "$PROFILE"')
    assert "--post" in run["run"]
    assert "${{" not in run["run"]  # inputs reach the shell through env, never templated into it
    assert gated["steps"][0]["with"]["clean"] is False  # the pin's build is what a try starts from
    pages = jobs["pages"]
    assert pages["uses"] == "./.github/workflows/pages.yml"
    assert pages["permissions"] == {"contents": "read", "actions": "read", "pages": "write", "id-token": "write"}


def test_pages_publishes_the_report_and_links_it_from_the_summary() -> None:
    wf = load("pages.yml")
    assert set(wf[True]) == {"workflow_call"}
    assert wf["permissions"] == {}
    build, deploy = wf["jobs"]["build"], wf["jobs"]["deploy"]
    assert build["permissions"] == {"contents": "read", "actions": "read"}
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert any("nox -s report -- --out build/site" in s.get("run", "") for s in build["steps"])
    assert any(str(s.get("uses", "")).startswith("actions/upload-pages-artifact@") and s["with"]["path"] == "build/site" for s in build["steps"])
    assert any("GITHUB_STEP_SUMMARY" in s.get("run", "") and "PAGE" in s.get("env", {}) for s in deploy["steps"])


def test_the_session_names_the_workflows_run_exist() -> None:
    text = "".join(p.read_text() for p in OURS)
    noxfile = (ROOT / "noxfile.py").read_text()
    for session in set(re.findall(r"nox -s (\w+)", text)):
        assert f"def {session}(" in noxfile or f'name="{session}"' in noxfile, session


def test_the_docs_name_the_scopes_the_token_needs() -> None:
    doc = (ROOT / "docs" / "try.md").read_text()
    assert "Commit statuses" in doc
    assert "Pull requests" in doc
    assert Path(ROOT / "docs" / "report.md").is_file()
