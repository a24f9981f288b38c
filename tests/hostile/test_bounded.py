"""Bounded inputs (issue 24): every file read is a regular file within a size limit, log judging stays linear and
refuses a log that repeats a case, a perf tolerance that turns the regression check off is refused, a recipe's env
cannot load code, and a bench config cannot move the server's address after ``--``."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest

from ci import cli, words
from ci.errors import ConfigError
from ci.gates.backend_ops import judge
from ci.gates.backend_ops import run as backend_ops
from ci.gates.backend_ops.output import TAIL_CUT, parse_console
from ci.gates.results import Status
from ci.gates.serving import bench_plan as plans
from ci.pin import claims
from ci.pin import pins as pins_yaml
from ci.pin.claims import parse_check
from ci.release import ledger
from ci.release import witness as witness_mod
from serve import bounded, facts, recipes
from serve.errors import A_GGUF_FILE, AT, FLAG_PATH, NOT_A_FILE, ServeError
from tests.support.messages import pattern, said
from tests.support.project import Project
from tests.support.route import ERROR_PREFIX as SERVE_ERROR

DATA = Path(__file__).resolve().parents[1] / "backend_ops" / "data"


def test_from_log_dev_zero_is_one_line_and_reads_nothing(project: Project) -> None:
    r = project.ci("gpu-tests", "--profile", "cpu", "--from-log", "/dev/zero")
    assert r.code == 2
    reason = bounded.NOT_REGULAR.format(kind=bounded.A_CHARACTER_DEVICE)
    message = backend_ops.LOG_UNREADABLE.format(flag="--from-log", path="/dev/zero", reason=reason)
    assert r.err == cli.ERROR.format(message=message) + "\n"


def test_from_log_fifo_is_named_not_waited_on(project: Project, tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(project.ci("gpu-tests", "--profile", "cpu", "--from-log", str(fifo)).code), daemon=True)
    t.start()
    t.join(timeout=30)
    assert done == [2]  # a hang would leave it empty


def test_a_file_over_its_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(bounded.CONFIG_LIMIT + 1)  # sparse: nothing is written, the size says it
    with pytest.raises(bounded.TooLarge, match=re.escape(bounded.TOO_LARGE.format(size=bounded.CONFIG_LIMIT + 1, limit="16 MiB"))):
        bounded.read_regular(big, bounded.CONFIG_LIMIT)


def test_pins_yaml_that_is_a_fifo_is_one_line(project: Project) -> None:
    pins = project.root / "pins.yaml"
    pins.unlink()
    os.mkfifo(pins)
    r = project.ci("verify-pin")
    assert r.code == 2
    unreadable = pins_yaml.UNREADABLE.format(file="pins.yaml", error=bounded.NOT_REGULAR.format(kind=bounded.A_FIFO))
    assert r.err == cli.ERROR.format(message=unreadable) + "\n"


def test_a_log_repeating_one_case_line_is_a_failure(tmp_path: Path) -> None:
    lines = (DATA / "cpu.console.txt").read_text().splitlines(keepends=True)
    cases = [i for i, ln in enumerate(lines) if ln.startswith("  GATED_DELTA_NET(")]
    forged = lines[: cases[0]] + [lines[cases[0]]] * 36 + lines[cases[-1] + 1 :]  # one passing case, 36 times: "36/36"
    path = tmp_path / "repeat.console.txt"
    path.write_text("".join(forged))
    result = backend_ops.judge_log(path, "CPU", {"GATED_DELTA_NET": 36}, None)
    assert result.status is Status.FAILED
    at = "7, 8, 9, 10, 11" + words.AND_MORE.format(count=31)
    label = judge.LABEL_LOG.format(log=path)
    assert any(said(judge.CASE_REPEATED, p, label=label, times=36, lines=at) for p in result.problems), result.problems


def test_log_judging_keeps_a_bounded_tail_of_noise() -> None:
    report = parse_console("Testing 1 devices\n" + "".join(f"noise {i}\n" for i in range(10_000)))
    assert report.last_words == TAIL_CUT.format(before=9960, shown=" | ".join(f"noise {i}" for i in range(9960, 10_000)))


@pytest.mark.parametrize("tolerance", [float("nan"), 5.0, -0.1])
def test_a_perf_tolerance_that_turns_the_regression_check_off_is_refused(tolerance: float) -> None:
    where = "pins.yaml: expect.perf[0]"
    with pytest.raises(ConfigError, match=re.escape(claims.BAD_TOLERANCE.format(where=where, tolerance=tolerance))):
        parse_check("tokens_per_second(dflash) / tokens_per_second(base) >= 1.5", "x", tolerance, where)


@pytest.mark.parametrize(
    "name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "GGML_BACKEND_PATH", "VK_ICD_FILENAMES", "HSA_TOOLS_LIB", "PYTHONPATH", "PATH"]
)
def test_a_recipe_env_that_loads_code_is_refused(name: str) -> None:
    doc = {"recipes": [{"id": "evil", "match": {}, "env": {name: "/tmp/x.so"}, "why": "w", "measured": "m", "source": "s"}]}
    at = f"{recipes.RECIPE.format(id='evil')}: env.{name}"
    refused = AT.format(where="recipes.json", problem=AT.format(where=at, problem=recipes.ENV_REFUSED))
    with pytest.raises(ServeError, match=pattern(refused)):
        recipes.parse(json.dumps(doc), "recipes.json")


def test_a_recipe_env_knob_is_still_allowed() -> None:
    doc = {"recipes": [{"id": "ok", "match": {}, "env": {"RADV_PERFTEST": "coop_matrix"}, "why": "w", "measured": "m", "source": "s"}]}
    assert recipes.parse(json.dumps(doc), "recipes.json").recipes[0].env == (("RADV_PERFTEST", "coop_matrix"),)


@pytest.mark.parametrize("config", ["x=-- --host 0.0.0.0", "x=-- --port 9000", "x=-- --port=9000", "x=-- -m other.gguf"])
def test_a_bench_config_cannot_move_the_server_after_the_double_dash(config: str) -> None:
    flag = config.split()[1].split("=")[0]
    refused = plans.SERVER_OWNED_FLAG.format(name="x", flag=flag, why=plans.SERVER_OWNED[flag])
    with pytest.raises(ConfigError, match=re.escape(refused)):
        plans.parse_config(config)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_serve_names_a_model_that_is_not_a_regular_file_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    from serve.cli import main

    path = {"fifo": tmp_path / "model.gguf", "device": Path("/dev/zero"), "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(main(["serve", "-m", str(path), "--dry-run"])), daemon=True)
    t.start()
    t.join(timeout=30)
    assert done == [2]  # a FIFO once hung the GGUF reader
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    mode_kind = {"fifo": bounded.A_FIFO, "device": bounded.A_CHARACTER_DEVICE, "directory": bounded.A_DIRECTORY}[kind]
    problem = NOT_A_FILE.format(kind=mode_kind, what=A_GGUF_FILE)
    assert err == SERVE_ERROR + AT.format(where=FLAG_PATH.format(flag="-m", path=path), problem=problem) + "\n"
    with pytest.raises(ServeError) as exc:  # the reader itself, as the equivalence gate calls it: the same words, at once
        facts.read_facts(str(path))
    assert exc.value.line == AT.format(where=path, problem=problem)


def test_a_witness_that_is_not_one_is_one_line(tmp_path: Path) -> None:
    witness = tmp_path / "witness"
    witness.write_text("garbage")
    with pytest.raises(ConfigError, match=re.escape(witness_mod.NOT_A_WITNESS.format(witness=witness, var=witness_mod.WITNESS_VAR))):
        ledger.read(tmp_path / "ledger.jsonl", witness=witness)


@pytest.mark.parametrize("what", ["cmake-args.local", "a prompt of --prompts"])
def test_the_machines_flags_and_a_prompt_that_are_fifos_are_named_not_waited_on(project: Project, tmp_path: Path, what: str) -> None:
    """The reads left over from the first pass (issue 24): the machine's flags file and the equivalence prompts."""
    if what == "cmake-args.local":
        os.mkfifo(project.root / "cmake-args.local")
        argv = ["build", "--profile", "cpu"]
    else:
        prompts = tmp_path / "prompts"
        prompts.mkdir()
        os.mkfifo(prompts / "code.txt")
        model = tmp_path / "m.gguf"
        model.write_bytes(b"GGUF")
        argv = ["equivalence", "--model", str(model), "--drafter", str(model), "--prompts", str(prompts), "--llama-server", "/bin/true"]
    done: list[tuple[int, str]] = []

    def run() -> None:
        r = project.ci(*argv)
        done.append((r.code, r.err))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=30)
    assert len(done) == 1  # a hang would leave it empty
    code, err = done[0]
    assert code != 0
    assert bounded.NOT_REGULAR.format(kind=bounded.A_FIFO) in err
    assert err.count("\n") == 1
