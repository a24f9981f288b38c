"""The runner without a real build: the driver's compile planned from the build's files and cached by their key, then
run through a stand-in compiler that "compiles" a stand-in driver, a Python script that reads the case file, computes
the op with the reference and writes the result as driver.c does (the real driver on real libraries: test_slow.py).
The stand-in plants what ORACLE_STAND_IN says: a NaN, an f16 state, no support, a crash, a short result, a hang."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ci.errors import ToolchainError
from ci.gates.oracle import run
from ci.gates.oracle.cases import Case, Draw, Shape, Span
from ci.gates.oracle.judge import DRIVER_FAILED, ENGINE_FLOORS, NON_FINITE, UNSUPPORTED, Outcome
from ci.gates.oracle.run import COMPILE_FAILED, DRIVER_TIMED_OUT, NO_HEADER, NO_LIBRARY, compile_driver, plan_driver, run_case, run_gate
from ci.gates.oracle.wire import SHORT_OUTPUT
from ci.gates.results import Status
from tests.support.messages import said

DRIVER = """\
#!{python}
import json, os, sys, time
import numpy as np
from ci.gates.oracle.reference import gated_delta_net
from ci.gates.oracle.wire import HEADER

args = sys.argv[1:]
with open({record!r}, "a") as fh:
    fh.write(json.dumps(args) + "\\n")
options = {{}}
while args[0].startswith("--"):
    options[args[0]] = args[1]
    args = args[2:]
device, case_id, given, result = args
plant = os.environ.get("ORACLE_STAND_IN", "")
if plant == "unsupported":
    print(f"oracle-driver: {{device}} does not support GATED_DELTA_NET of case {{case_id}}")
    sys.exit(5)
if plant == "crash":
    print("GGML_ASSERT(ggml_is_contiguous(state)) failed")
    sys.exit(6)
if plant == "hang":
    time.sleep(60)
blob = open(given, "rb").read()
_, s, hk, hv, t, b, k, gw, permuted = HEADER.unpack_from(blob)
floats = np.frombuffer(blob, "<f4", offset=HEADER.size)
parts, at = [], 0
for shape in ((b, hk, t, s) if permuted else (b, t, hk, s),) * 2 + ((b, hv, t, s) if permuted else (b, t, hv, s),) + ((b, t, hv, gw), (b, t, hv), (b, hv, s, s)):
    n = int(np.prod(shape))
    parts.append(floats[at:at + n].reshape(shape))
    at += n
q, kk, v = (p.transpose(0, 2, 1, 3) if permuted else p for p in parts[:3])
ref = gated_delta_net(q, kk, v, parts[3], parts[4], parts[5], k)
slots = np.full((k, b, hv, s, s), np.nan, dtype=np.float32)
slots[: ref.slots.shape[0]] = ref.slots.astype(np.float16 if plant == "f16" else np.float32)
dst = np.concatenate([ref.output.astype(np.float32).ravel(), slots.ravel()])
if plant == "nan":
    dst[5] = np.nan
if plant == "short":
    dst = dst[:-1]
dst.astype("<f4").tofile(result)
if "--bench-mode" in options:
    print(f"case_ms: {{case_id}} 1.250000")
"""

COMPILER = """\
#!{python}
import json, os, sys
args = sys.argv[1:]
with open({record!r}, "a") as fh:
    fh.write(json.dumps(args) + "\\n")
if os.environ.get("ORACLE_STAND_IN_CC") == "fail":
    print("driver.c:140: error: too few arguments to function 'ggml_gated_delta_net'")
    sys.exit(1)
out = args[args.index("-o") + 1]
with open(out, "w") as fh:
    fh.write(open({driver!r}).read())
os.chmod(out, 0o755)
"""

SMALL = (
    Case("gdn-small-kda-perm", 1, Shape(8, 2, 4, 6, seqs=2, snapshots=3, kda=True, permuted=True)),
    Case("gdn-small-k8-past-3", 2, Shape(8, 1, 2, 3, snapshots=8)),
    Case("gdn-small-zero", 3, Shape(8, 1, 1, 2), Draw(beta=Span(0.0, 0.0), state=Span(0.0, 0.0))),
)


class Build:
    """A build's ggml as the runner sees it: headers, versioned shared libraries (as the wheel ships them), and a
    stand-in compiler whose every call is recorded."""

    def __init__(self, root: Path) -> None:
        self.include = root / "include"
        self.lib = root / "bin"
        self.include.mkdir(parents=True)
        self.lib.mkdir()
        for name in run.HEADERS:
            (self.include / name).write_text(f"// {name}\n")
        for name in run.LIBRARIES:
            (self.lib / f"lib{name}.so.0.26.0").write_bytes(name.encode())
        self.records = root / "records"
        driver = root / "stand-in-driver"
        driver.write_text(DRIVER.format(python=sys.executable, record=str(self.records / "driver.jsonl")))
        self.cc = root / "cc"
        self.cc.write_text(COMPILER.format(python=sys.executable, record=str(self.records / "cc.jsonl"), driver=str(driver)))
        self.cc.chmod(0o755)
        self.records.mkdir()

    def calls(self, what: str) -> list[list[str]]:
        path = self.records / f"{what}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@pytest.fixture(autouse=True)
def _stand_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the stand-ins read is no program's by default (ci.command.environment): the tests name it to be passed on."""
    monkeypatch.setenv("ONEBIT_PASS_ENV", "ORACLE_STAND_IN ORACLE_STAND_IN_CC")


@pytest.fixture
def build(tmp_path: Path) -> Build:
    return Build(tmp_path / "build")


def test_the_key_follows_the_driver_the_headers_and_the_libraries(build: Build, tmp_path: Path) -> None:
    first = plan_driver(build.lib, build.include, tmp_path / "cache", str(build.cc))
    assert first == plan_driver(build.lib, build.include, tmp_path / "cache", str(build.cc))
    assert [p.name for p in first.libraries] == ["libggml.so.0.26.0", "libggml-base.so.0.26.0"]
    assert first.folder == tmp_path / "cache" / f"oracle-driver-{first.key[:16]}"
    keys = {first.key}
    (build.include / "ggml.h").write_text("// another ggml.h\n")
    keys.add(plan_driver(build.lib, build.include, tmp_path / "cache", str(build.cc)).key)
    (build.lib / "libggml-base.so.0.26.0").write_bytes(b"rebuilt")
    keys.add(plan_driver(build.lib, build.include, tmp_path / "cache", str(build.cc)).key)
    source = tmp_path / "driver.c"
    source.write_text("int main(void) { return 0; }\n")
    keys.add(plan_driver(build.lib, build.include, tmp_path / "cache", str(build.cc), source).key)
    assert len(keys) == 4


def test_the_plain_library_name_wins_and_the_rpath_is_the_build_s_folder(build: Build, tmp_path: Path) -> None:
    (build.lib / "libggml.so").write_bytes(b"ggml")
    plan = plan_driver(build.lib, build.include, tmp_path / "cache", str(build.cc))
    assert plan.libraries[0] == build.lib / "libggml.so"
    argv = plan.argv(tmp_path / "out")
    rpaths = [a for a in argv if "rpath" in a]
    assert rpaths == [f"-Wl,-rpath,{build.lib.resolve()}"]
    assert argv[argv.index("-I") + 1] == str(build.include)


def test_a_build_without_shared_libraries_or_headers(build: Build, tmp_path: Path) -> None:
    (build.lib / "libggml-base.so.0.26.0").unlink()
    with pytest.raises(ToolchainError) as err:
        plan_driver(build.lib, build.include, tmp_path, str(build.cc))
    assert err.value.message == NO_LIBRARY.format(folder=build.lib, name="ggml-base")
    (build.include / "ggml-alloc.h").unlink()
    with pytest.raises(ToolchainError) as err:
        plan_driver(build.lib, build.include, tmp_path, str(build.cc))
    assert err.value.message == NO_HEADER.format(folder=build.include, name="ggml-alloc.h")


def test_the_driver_is_compiled_once_per_key(build: Build, tmp_path: Path) -> None:
    plan = plan_driver(build.lib, build.include, tmp_path / "cache", str(build.cc))
    exe = compile_driver(plan)
    assert exe == plan.executable
    assert os.access(exe, os.X_OK)
    assert compile_driver(plan) == exe
    assert len(build.calls("cc")) == 1
    assert [p.name for p in plan.folder.iterdir()] == ["oracle-driver"]  # no partial file left beside it
    (build.lib / "libggml.so.0.26.0").write_bytes(b"rebuilt")
    compile_driver(plan_driver(build.lib, build.include, tmp_path / "cache", str(build.cc)))
    assert len(build.calls("cc")) == 2


def test_the_gate_on_a_correct_device(build: Build, tmp_path: Path) -> None:
    result = run_gate(build.lib, build.include, "CPU", ENGINE_FLOORS, tmp_path / "work", SMALL, compiler=str(build.cc))
    assert result.status is Status.PASSED, result.problems
    assert result.count("passed") == 3
    assert result.cases[2].message.startswith("gdn-small-zero: output exact, slots exact")
    calls = build.calls("driver")
    assert calls[0][:4] == ["--threads", str(os.cpu_count()), "--backend-dir", str(build.lib.resolve())]
    assert [c[-4:-2] for c in calls] == [["CPU", c.id] for c in SMALL]
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [run_plan_folder(build, tmp_path)]  # the case files are gone


def run_plan_folder(build: Build, tmp_path: Path) -> str:
    return plan_driver(build.lib, build.include, tmp_path / "work", str(build.cc)).folder.name


@pytest.mark.parametrize(
    ("plant", "status", "template", "known"),
    [
        ("nan", Status.FAILED, NON_FINITE, {"count": 1, "output": 1, "slots": 0}),
        ("f16", Status.FAILED, "{case}: output {output}, slots {slots} (floors 100/100); slots below its floor", {}),
        ("unsupported", Status.SKIPPED, UNSUPPORTED, {"device": "Vulkan0"}),
        ("crash", Status.ERROR, DRIVER_FAILED, {"why": "exit 6: GGML_ASSERT(ggml_is_contiguous(state)) failed"}),
    ],
)
def test_what_a_device_gets_wrong(
    build: Build, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plant: str, status: Status, template: str, known: dict[str, object]
) -> None:
    monkeypatch.setenv("ORACLE_STAND_IN", plant)
    result = run_gate(build.lib, build.include, "Vulkan0", ENGINE_FLOORS, tmp_path / "work", SMALL[:1], compiler=str(build.cc))
    case = result.cases[0]
    assert case.status is status
    assert said(template, case.message, case=SMALL[0].id, **known), case.message
    assert result.status is (Status.ERROR if status is Status.SKIPPED else status)  # nothing else ran: no verdict
    assert build.calls("driver")[0][:2] == ["--threads", "0"]  # a GPU: the backend's own threads


def test_a_short_result_and_a_hang_are_errors(build: Build, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = plan_driver(build.lib, build.include, tmp_path / "cache", str(build.cc))
    driver = compile_driver(plan)
    monkeypatch.setenv("ORACLE_STAND_IN", "short")
    short = run_case(driver, "CPU", SMALL[1], tmp_path / "work")
    shape = SMALL[1].shape
    assert (short.outcome, short.why) == (Outcome.FAILED, SHORT_OUTPUT.format(count=shape.dst_count - 1, expected=shape.dst_count))
    monkeypatch.setenv("ORACLE_STAND_IN", "hang")
    hung = run_case(driver, "CPU", SMALL[1], tmp_path / "work", timeout=1.0)
    assert (hung.outcome, hung.why) == (Outcome.FAILED, DRIVER_TIMED_OUT.format(timeout=1.0))


def test_bench_mode_and_kept_files(build: Build, tmp_path: Path) -> None:
    driver = compile_driver(plan_driver(build.lib, build.include, tmp_path / "cache", str(build.cc)))
    measured = run_case(driver, "CPU", SMALL[0], tmp_path / "work", threads=2, bench=5, keep=True)
    assert measured.case_ms == 1.25
    assert build.calls("driver")[0][:4] == ["--threads", "2", "--bench-mode", "5"]
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [f"{SMALL[0].id}.in", f"{SMALL[0].id}.out"]


def test_a_header_the_driver_does_not_compile_against_is_the_gate_s_error(build: Build, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORACLE_STAND_IN_CC", "fail")
    result = run_gate(build.lib, build.include, "CPU", ENGINE_FLOORS, tmp_path / "work", SMALL, compiler=str(build.cc))
    assert result.status is Status.ERROR
    assert said(COMPILE_FAILED, result.summary, include=build.include, tail="driver.c:140: error: too few arguments to function 'ggml_gated_delta_net'")
    assert build.calls("driver") == []
    assert not any(p.name.startswith("oracle-driver") and any(p.iterdir()) for p in (tmp_path / "work").iterdir())
