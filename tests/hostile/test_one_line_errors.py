"""Every row of issue 43's "one-line errors" gives one line, never an internal error: a ledger head of 100,000 ``[``
(RecursionError), a head signature of non-ASCII characters (TypeError), a perf check ``>= 1.2.3`` (ValueError), a
patch named ``größe.patch`` under ``PYTHONIOENCODING=ascii`` or ``LC_ALL=C``, a full disk while writing backend_ops
results (a raw OSError naming no file) or route's JUnit (ParseError), a recipe env value with a NUL byte (ValueError),
and gpu_tests on a build whose checkout was emptied (the oracle's "no ggml.h" and no next step).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci import cli
from ci.errors import ConfigError
from ci.gates.results import GateResult, Status
from ci.gates.route import run as route_run
from ci.pin import claims
from ci.release import ledger
from serve import recipes
from serve.cli import main as serve_main
from serve.errors import AT
from tests.support.build import build_cpu
from tests.support.fixtures import MakePatch
from tests.support.gguf_files import make
from tests.support.messages import said
from tests.support.project import Project
from tests.support.route import ERROR_PREFIX

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = ledger.BuildContext("k" * 64, "p" * 40, "s" * 64, "cpu", "CPU")
DATA = ROOT / "tests" / "backend_ops" / "data"


def one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    assert "internal error" not in text
    return lines[0]


def test_a_ledger_head_nested_too_deeply_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, GateResult("route", Status.PASSED, "x"), CONTEXT)
    ledger.head_path(path).write_text("[" * 100_000)
    with pytest.raises(ConfigError) as refused:
        ledger.read(path)
    assert one_line(refused.value.message).startswith(f"{ledger.head_path(path)}: not a ledger head (nested too deeply)")


def test_a_head_signature_of_other_characters_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, GateResult("route", Status.PASSED, "x"), CONTEXT, key=b"k")
    head = json.loads(ledger.head_path(path).read_text())
    ledger.head_path(path).write_text(json.dumps({**head, "sig": "ä" * 64}))
    with pytest.raises(ConfigError) as refused:
        ledger.read(path, b"k")
    assert refused.value.message == ledger.HEAD_SIGNATURE_WRONG.format(path=ledger.head_path(path), var=ledger.KEY_VAR, why=ledger.FORGED)


@pytest.mark.parametrize("floor", ["1.2.3", ".", "1..2"])
def test_a_perf_check_whose_floor_is_no_number_is_one_line(floor: str) -> None:
    text = f"decode(draft) / decode(base) >= {floor}"
    with pytest.raises(ConfigError) as refused:
        claims.parse_check(text, "measured", 0.1, "pins.yaml: expect.perf[0]")
    assert refused.value.message == claims.NOT_A_CHECK.format(where="pins.yaml: expect.perf[0]", text=text)


@pytest.mark.parametrize("setting", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "LANG": "C"}])
def test_a_patch_name_out_of_the_locales_characters_is_shown_not_a_crash(
    project: Project, add_patch: MakePatch, setting: dict[str, str]
) -> None:
    add_patch("größe.patch", {"README.md": "fork, bigger\n"})
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LC_ALL", "LANG")}, **setting}
    argv = [sys.executable, "-m", "ci", "--root", str(project.root), "patches", "--check", "--remote", str(project.fork.path)]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=120, check=False)
    out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
    assert "Traceback" not in err, err
    assert "internal error" not in err, err
    assert done.returncode == 0, err
    assert "gr\\xf6\\xdfe.patch" in out or "größe.patch" in out, out


FULL_DISK = """
import resource, signal, sys
from ci.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, as a full disk gives ENOSPC
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.exit(main(sys.argv[2:]))
"""


def test_a_full_disk_while_backend_ops_results_are_written_names_the_file(project: Project, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    args = ["--root", str(project.root), "gpu-tests", "--profile", "cpu", "--from-log", str(DATA / "cpu.console.txt"), "--out", str(out)]
    done = subprocess.run([sys.executable, "-c", FULL_DISK, "4096", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    line = one_line(done.stderr)
    assert line.startswith(cli.ERROR.format(message=str(out))), line
    assert done.returncode == cli.IO_ERROR


def test_a_route_junit_cut_short_by_a_full_disk_is_a_problem_of_the_gate(tmp_path: Path) -> None:
    junit = tmp_path / "route.pytest.junit.xml"
    junit.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="3"><testcase classname="a" na')
    cases, problem = route_run.read_junit(junit)
    assert cases == []
    assert problem is not None
    assert said(route_run.JUNIT_UNREADABLE, problem, junit=junit)


def test_a_recipe_env_value_with_a_nul_byte_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.json").write_text(json.dumps({"recipes": [{"id": "x", "measured": "1 -> 2", "env": {"GGML_SCHED_MAX_COPIES": "2\u00003"}}]}))
    code = serve_main(["serve", "-m", make("plain", tmp_path), "--recipes", "mine.json", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    line = one_line(err)
    assert line == ERROR_PREFIX + AT.format(where="mine.json", problem=AT.format(where='recipe "x": env.GGML_SCHED_MAX_COPIES', problem=recipes.HAS_NUL))


ORACLE_FLOORS = "  oracle:\n    cpu:\n      output_db: 120\n      slots_db: 120\n      measured: a test's\n"


def test_gpu_tests_on_a_build_whose_checkout_was_emptied_says_what_to_do(build_project: Project) -> None:
    from ci.gates.oracle import run as oracle_run

    build_project.pins.write_text(build_project.pins.read_text() + ORACLE_FLOORS)  # under expect:, the template's last section
    assert build_cpu(build_project).code == 0
    checkout = build_project.root / "third_party" / "llama.cpp-rocmfpx"
    for entry in checkout.iterdir():
        if entry.name != ".git":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    r = build_project.ci("gpu-tests", "--profile", "cpu", "--gate", "oracle")
    line = one_line(r.err)
    assert oracle_run.NO_HEADER_NEXT in line, line
