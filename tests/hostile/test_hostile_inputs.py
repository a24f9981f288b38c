"""Hostile inputs: for each file the project reads, an empty, a binary, a truncated, a duplicated-key and a deeply
nested one. Each gets one line naming the file, no traceback, and the file stays byte-identical."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ci import cli, schema
from ci.errors import ServerFailed
from ci.gates.backend_ops import judge as backend_ops_judge
from ci.gates.serving import llama, model_sets
from ci.gates.serving.llama import LlamaServer, ServerLaunch
from ci.pin import project as pin_project
from ci.release import records
from ci.source import series as series_file
from ci.source import sync
from serve import bounded
from serve import errors as serve_errors
from serve.cli import main as serve_main
from tests.support.fixtures import MakePatch
from tests.support.gguf_files import make
from tests.support.http import answering
from tests.support.messages import partly, pattern, said
from tests.support.project import DELTA_AT_C1, Project
from tests.support.route import ERROR_PREFIX as SERVE_ERROR

BINARY = bytes(range(256)) * 8  # NUL, control codes, bytes that are not UTF-8
DEEP = 100_000

KINDS = ("empty", "binary", "truncated", "duplicated-key", "deeply-nested")


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


def one_error_line(o: Outcome, prefix: str, name: str) -> str:
    assert "Traceback" not in o.out + o.err
    assert o.code not in (0, 70), (o.code, o.out, o.err)  # refused, and not an internal error
    lines = [ln for ln in o.err.splitlines() if ln.startswith(prefix)]
    assert len(lines) == 1, o.err
    assert name in lines[0], lines[0]
    return lines[0]


# -- pins.yaml, .gitmodules, patches/series, a patch file: through the CLI on a real project -----------------------------


def pins_yaml(kind: str, good: bytes) -> bytes:
    return {
        "empty": b"",
        "binary": BINARY,
        "truncated": good[: len(good) // 3],
        "duplicated-key": good.replace(b"  branch: main\n", b"  branch: main\n  commit: " + b"0" * 40 + b"\n"),
        "deeply-nested": b"fork: " + b"[" * DEEP + b"]" * DEEP + b"\n",
    }[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_pins_yaml(project: Project, kind: str) -> None:
    content = pins_yaml(kind, project.pins.read_bytes())
    project.pins.write_bytes(content)
    r = project.ci("verify-pin")
    line = one_error_line(Outcome(r.code, r.out, r.err), cli.ERROR.format(message=""), "pins.yaml")
    if kind == "duplicated-key":
        assert said(schema.DUPLICATE_KEY, line, key="commit")
    assert project.pins.read_bytes() == content


def gitmodules(kind: str, good: bytes) -> bytes:
    return {
        "empty": b"",
        "binary": BINARY,
        "truncated": good[: len(good) // 2],
        "duplicated-key": good + b"\tpath = elsewhere\n",
        "deeply-nested": b"[" * DEEP + b"\n",
    }[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_gitmodules(project: Project, kind: str) -> None:
    path = project.root / ".gitmodules"
    content = gitmodules(kind, path.read_bytes())
    path.write_bytes(content)
    r = project.ci("verify-pin")
    assert "Traceback" not in r.err
    assert r.code == 2
    assert ".gitmodules" in r.err
    assert path.read_bytes() == content


def test_gitmodules_with_two_sections_for_one_path_names_both(project: Project) -> None:
    path = project.root / ".gitmodules"
    good = path.read_text()
    url = next(line.split("=", 1)[1].strip() for line in good.splitlines() if line.strip().startswith("url"))
    content = good + f'[submodule "llama.cpp"]\n\tpath = third_party/llama.cpp-rocmfpx\n\turl = {url}\n'
    path.write_text(content)
    r = project.ci("verify-pin")
    line = one_error_line(Outcome(r.code, r.out, r.err), cli.ERROR.format(message=""), ".gitmodules")
    twice = pin_project.PATH_TWICE.format(file=".gitmodules", path="third_party/llama.cpp-rocmfpx", first="third_party/llama.cpp-rocmfpx", second="llama.cpp")
    assert r.err == cli.ERROR.format(message=twice) + "\n", line
    assert path.read_text() == content


def series(kind: str) -> bytes:
    return {
        "empty": b"",
        "binary": BINARY,
        "truncated": b"fix-del",
        "duplicated-key": b"fix.patch\nfix.patch\n",
        "deeply-nested": b"(" * DEEP + b"\n",
    }[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_patch_series(project: Project, add_patch: MakePatch, kind: str) -> None:
    add_patch("fix.patch", {"ggml/src/delta.c": DELTA_AT_C1.replace("x + 1;", "x + 100;")})
    path = project.root / "patches" / "series"
    content = series(kind)
    path.write_bytes(content)
    r = project.ci("patches", "--check", "--remote", str(project.fork.path))
    if kind == "empty":  # an empty series is a series of no patches: nothing to refuse
        assert r.code == 0, r.err
        assert said(sync.CHECKING_EMPTY, r.out, commit=project.fork.c1[:7])
    else:
        one_error_line(Outcome(r.code, r.out, r.err), cli.ERROR.format(message=""), "patches/series")
    assert path.read_bytes() == content


@pytest.mark.parametrize("first", ["a-comment", "a-patch"])
def test_a_series_with_a_byte_order_mark_is_named_as_such(project: Project, add_patch: MakePatch, first: str) -> None:
    add_patch("fix.patch", {"ggml/src/delta.c": DELTA_AT_C1.replace("x + 1;", "x + 100;")})
    path = project.root / "patches" / "series"
    listed = path.read_bytes() if first == "a-comment" else b"fix.patch\n"
    content = b"\xef\xbb\xbf" + listed  # an editor's UTF-8 BOM: quilt reads the first line as "\ufefffix.patch", a missing file
    path.write_bytes(content)
    r = project.ci("patches", "--check", "--remote", str(project.fork.path))
    line = one_error_line(Outcome(r.code, r.out, r.err), cli.ERROR.format(message=""), "patches/series")
    assert line == cli.ERROR.format(message=series_file.BYTE_ORDER_MARK.format(series="patches/series", line=1))
    assert path.read_bytes() == content


def patch_file(kind: str, good: bytes) -> bytes:
    return {
        "empty": b"",
        "binary": BINARY,
        "truncated": good[: good.index(b"@@") + 6],
        "duplicated-key": good.replace(b"Upstream: ", b"Upstream: https://example.invalid/a\nUpstream: ", 1),
        "deeply-nested": good.replace(b"diff --git", b"diff --git" + b" a/" * DEEP, 1),
    }[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_patch_file(project: Project, add_patch: MakePatch, kind: str) -> None:
    add_patch("fix.patch", {"ggml/src/delta.c": DELTA_AT_C1.replace("x + 1;", "x + 100;")})
    path = project.root / "patches" / "fix.patch"
    content = patch_file(kind, path.read_bytes())
    path.write_bytes(content)
    r = project.ci("patches", "--check", "--remote", str(project.fork.path))
    line = one_error_line(Outcome(r.code, r.out, r.err), cli.ERROR.format(message=""), "patches/fix.patch")
    if kind == "duplicated-key":
        assert line == cli.ERROR.format(message=series_file.TRAILER_TWICE.format(patch="patches/fix.patch", trailer="Upstream"))
    assert path.read_bytes() == content


# -- the launcher's inputs: a recipes file, a GGUF header --------------------------------------------------------------


def serve(capsys: pytest.CaptureFixture[str], *args: str) -> Outcome:
    code = serve_main(["serve", *args, "--dry-run"])
    out, err = capsys.readouterr()
    return Outcome(code, out, err)


def recipes(kind: str) -> bytes:
    good = b'{"about": "x", "recipes": []}'
    return {
        "empty": b"",
        "binary": BINARY,
        "truncated": good[:12],
        "duplicated-key": b'{"about": "x", "about": "y", "recipes": []}',
        "deeply-nested": b"[" * DEEP + b"]" * DEEP,
    }[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_recipes_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    monkeypatch.chdir(tmp_path)
    model = make("plain", tmp_path)
    path = tmp_path / "hostile-recipes.json"
    path.write_bytes(recipes(kind))
    o = serve(capsys, "-m", model, "--recipes", str(path), "--llama-server", "/bin/true")
    one_error_line(o, SERVE_ERROR, "hostile-recipes.json")
    assert path.read_bytes() == recipes(kind)


def gguf(kind: str, good: bytes) -> bytes:
    # a GGUF header: magic, version, tensor count (u64), key-value count (u64), then the pairs: a u64-long key,
    # a u32 type, the value (a string: u64 length and bytes). The first pair is general.architecture, a string.
    def u64(at: int) -> int:
        return int.from_bytes(good[at : at + 8], "little")

    key_end = 32 + u64(24)
    first_end = key_end + 4 + 8 + u64(key_end + 4)
    twice = good[:16] + (u64(16) + 1).to_bytes(8, "little") + good[24:first_end] + good[24:first_end] + good[first_end:]
    return {
        "empty": b"",
        "binary": BINARY,
        "truncated": good[: len(good) // 3],
        "duplicated-key": twice,
        "deeply-nested": good[:16] + (10**6).to_bytes(8, "little") + b"\x00" * 64,  # claims a million pairs
    }[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_gguf_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    monkeypatch.chdir(tmp_path)
    good = (tmp_path / make("plain", tmp_path)).read_bytes()
    path = tmp_path / "hostile.gguf"
    content = gguf(kind, good)
    path.write_bytes(content)
    o = serve(capsys, "-m", "hostile.gguf", "--llama-server", "/bin/true")
    one_error_line(o, SERVE_ERROR, "hostile.gguf")
    assert path.read_bytes() == content


@pytest.mark.parametrize(
    ("flag", "named", "what"),
    [
        ("-m", "-m", serve_errors.A_GGUF_FILE),
        ("--model", "-m", serve_errors.A_GGUF_FILE),
        ("--dflash", "--dflash", serve_errors.A_GGUF_FILE),
        ("--mtp", "--mtp", serve_errors.A_GGUF_FILE),
        ("--recipes", "--recipes", serve_errors.A_RECIPES_FILE),
        ("--llama-server", "--llama-server", serve_errors.LLAMA_SERVER),
    ],
)
@pytest.mark.parametrize("kind", ["directory", "fifo", "missing"])
def test_every_serve_path_flag_names_a_directory_a_fifo_or_nothing_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flag: str, named: str, what: str, kind: str
) -> None:
    monkeypatch.chdir(tmp_path)
    model = make("plain", tmp_path)
    given = tmp_path / "given"
    problem = serve_errors.NO_SUCH_FILE
    if kind == "directory":
        given.mkdir()
        problem = serve_errors.NOT_A_FILE.format(kind=bounded.A_DIRECTORY, what=what)
    elif kind == "fifo":
        os.mkfifo(given)  # never opened: a reader would wait on it
        problem = serve_errors.NOT_A_FILE.format(kind=bounded.A_FIFO, what=what)
    args = [flag, str(given)] if named == "-m" else ["-m", model, flag, str(given)]
    o = serve(capsys, *args, *([] if flag == "--llama-server" else ["--llama-server", "/bin/true"]))
    line = one_error_line(o, SERVE_ERROR, str(given))
    assert line == SERVE_ERROR + serve_errors.AT.format(where=serve_errors.FLAG_PATH.format(flag=named, path=given), problem=problem)
    assert o.code == (5 if flag == "--llama-server" else 2)


# -- the ledger ----------------------------------------------------------------------------------------------------


def ledger_text(kind: str, good: bytes) -> bytes:
    return {
        "empty": b"\n",
        "binary": BINARY + b"\n",
        "truncated": good[: len(good) // 2],
        "duplicated-key": good.replace(b'{"artefacts"', b'{"verdict": "passed", "artefacts"', 1),
        "deeply-nested": b"[" * DEEP + b"]" * DEEP + b"\n",
    }[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_ledger_lines(project: Project, kind: str) -> None:
    log = Path(__file__).resolve().parents[1] / "backend_ops" / "data" / "cpu.console.txt"
    assert project.ci("gpu-tests", "--profile", "cpu", "--from-log", str(log)).code in (0, 7)
    path = project.root / "build" / "results" / "ledger.jsonl"
    content = ledger_text(kind, path.read_bytes())
    path.write_bytes(content)
    r = project.ci("gpu-tests", "--profile", "cpu", "--from-log", str(log))
    one_error_line(Outcome(r.code, r.out, r.err), cli.ERROR.format(message=""), "ledger.jsonl")
    assert path.read_bytes() == content


# -- what test-backend-ops printed: a console log and its --output sql -----------------------------------------------


def tbo_output(kind: str, good: bytes) -> bytes:
    return {
        "empty": b"",
        "binary": BINARY,
        "truncated": good[: len(good) // 2] + b"\x1b[1;3",  # cut inside an ANSI escape
        "duplicated-key": good + good,  # the whole report twice
        "deeply-nested": b"  GATED_DELTA_NET(" + b"(" * DEEP + b"): OK\n",
    }[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_test_backend_ops_console_log(tmp_path: Path, kind: str) -> None:
    data = Path(__file__).resolve().parents[1] / "backend_ops" / "data"
    path = tmp_path / "hostile.console.txt"
    content = tbo_output(kind, (data / "cpu.console.txt").read_bytes())
    path.write_bytes(content)
    o = _backend_ops(tmp_path, "--from-log", str(path))
    assert "Traceback" not in o.out + o.err
    assert o.code == 7, o.out + o.err  # judged: the gate fails, with the evidence, and its JUnit is written
    failed = partly(records.GATE_SUMMARY, gate="backend_ops", summary=backend_ops_judge.FAILED_SUMMARY)
    assert pattern(failed, device="CPU").match(o.out), o.out
    assert (tmp_path / "out" / "backend_ops.junit.xml").is_file()
    assert path.read_bytes() == content


@pytest.mark.parametrize("kind", KINDS)
def test_test_backend_ops_sql_output(tmp_path: Path, kind: str) -> None:
    data = Path(__file__).resolve().parents[1] / "backend_ops" / "data"
    path = tmp_path / "hostile.sql"
    content = tbo_output(kind, (data / "cpu.sql.txt").read_bytes())
    path.write_bytes(content)
    o = _backend_ops(tmp_path, "--from-log", str(data / "cpu.console.txt"), "--from-sql", str(path))
    assert "Traceback" not in o.out + o.err
    assert o.code == 7, o.out + o.err
    assert "sql" in o.out
    assert (tmp_path / "out" / "backend_ops.junit.xml").is_file()
    assert path.read_bytes() == content


def _backend_ops(tmp_path: Path, *args: str) -> Outcome:
    from ci.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["backend-ops", "--device", "CPU", "--expect", "GATED_DELTA_NET=36", "--pinned-commit", "none", "--out", str(tmp_path / "out"), *args])
    return Outcome(code, out.getvalue(), err.getvalue())


# -- a server's answers ---------------------------------------------------------------------------------------------


def answer(kind: str) -> bytes:
    good = json.dumps({"content": "x", "tokens": [1], "stop": True}).encode()
    return {
        "empty": b"",
        "binary": BINARY,
        "truncated": good[: len(good) // 2],
        "duplicated-key": b'{"content": "x", "content": "y"}',
        "deeply-nested": b"[" * DEEP + b"]" * DEEP,
    }[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_server_answers(tmp_path: Path, kind: str) -> None:
    with answering(answer(kind)) as port:
        handle = LlamaServer(ServerLaunch("baseline", ("true",), "127.0.0.1", port), tmp_path / "server.log")
        with pytest.raises(ServerFailed) as exc:
            handle.completion({"prompt": "x"}, timeout=10)
        handle._http.close()
    message = exc.value.message
    assert "\n" not in message
    not_json = pattern(llama.BAD_ANSWER, leg="baseline", path="/completion")
    assert not_json.fullmatch(message) or message == llama.NOT_AN_OBJECT.format(leg="baseline", path="/completion"), message


Check = Callable[[], None]


def test_a_binary_log_from_a_gpu_box_is_judged_and_recorded(project: Project, tmp_path: Path) -> None:
    log = tmp_path / "cut.console.txt"
    log.write_bytes(BINARY + b"\x1b[1;3")
    r = project.ci("gpu-tests", "--profile", "cpu", "--from-log", str(log))
    assert r.code == 7, r.err
    assert "Traceback" not in r.err
    from ci.release import ledger

    (record,) = ledger.read(project.root / "build" / "results" / "ledger.jsonl").records
    assert (record.gate, record.verdict) == ("backend_ops", "failed")
    assert (project.root / "build" / "results" / "from-log" / "backend_ops.junit.xml").is_file()


# -- the equivalence command: the user's own files are named before a program it looks for -----------------------------


@pytest.mark.parametrize("missing", ["--model", "--drafter"])
def test_equivalence_names_a_missing_model_before_a_missing_llama_server(tmp_path: Path, missing: str) -> None:
    from ci.cli import main

    models = {"--model": tmp_path / "target.gguf", "--drafter": tmp_path / "drafter.gguf"}
    for option, path in models.items():
        if option != missing:
            path.write_bytes(b"GGUF")  # there; never read, as the other file is named first
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["equivalence", "--model", str(models["--model"]), "--drafter", str(models["--drafter"]),
                     "--llama-server", "no-such-llama-server-here", "--out", str(tmp_path / "out")])  # fmt: skip
    line = one_error_line(Outcome(code, out.getvalue(), err.getvalue()), cli.ERROR.format(message=""), str(models[missing]))
    assert line == cli.ERROR.format(message=model_sets.NO_SUCH_MODEL.format(option=missing, path=models[missing]))
    assert not (tmp_path / "out").exists()


def test_equivalence_names_a_bad_token_count_before_a_missing_llama_server(tmp_path: Path) -> None:
    from ci.cli import main
    from ci.gates.equivalence import plan as eq_plan

    for name in ("target.gguf", "drafter.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")  # there; never read, as --tokens is refused first
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["equivalence", "--model", str(tmp_path / "target.gguf"), "--drafter", str(tmp_path / "drafter.gguf"), "--tokens", "0",
                     "--llama-server", "no-such-llama-server-here", "--out", str(tmp_path / "out")])  # fmt: skip
    line = one_error_line(Outcome(code, out.getvalue(), err.getvalue()), cli.ERROR.format(message=""), "--tokens")
    assert line == cli.ERROR.format(message=eq_plan.TOO_FEW_TOKENS.format(tokens=0))
