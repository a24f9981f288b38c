"""The parsers on real captures (ANSI codes included) and on logs derived from them."""

from __future__ import annotations

import pytest

from ci.gates.backend_ops.output import CaseMark, parse_console, parse_sql, strip_ansi
from tests.support import derive
from tests.support.backend_ops import OP, UPSTREAM_CASES, console, sql, text


def test_derived_logs_are_current() -> None:
    for name, made in derive.derived().items():
        assert text(name) == made, f"data/{name} is stale: run python -m tests.backend_ops.derive"


def test_the_h200_capture() -> None:
    report = console("h200-cuda0.console.txt")
    assert report.device_count == 2
    assert [d.name for d in report.devices] == ["CUDA0", "CPU"]
    cuda = report.device("CUDA0")
    assert cuda is not None
    assert cuda.description == "NVIDIA H200"
    assert cuda.ran
    assert len(cuda.cases) == UPSTREAM_CASES
    assert {c.status for c in cuda.cases} == {CaseMark.OK}
    assert {c.op for c in cuda.cases} == {OP}
    assert cuda.cases[0].params == "type=f32,head_count=32,head_size=128,n_seq_tokens=1,n_seqs=1,v_repeat=1,permuted=0,kda=0,K=1"
    assert cuda.cases[-1].name == f"{OP}(type=f32,head_count=4,head_size=64,n_seq_tokens=16,n_seqs=2,v_repeat=1,permuted=0,kda=0,K=4)"
    assert all(c.message == "" and c.interleaved == "" for c in cuda.cases)
    assert cuda.summary == (36, 36)
    assert cuda.failing == ()
    assert cuda.status == "OK"
    cpu = report.device("CPU")
    assert cpu is not None
    assert cpu.skipped == "Skipping"
    assert not cpu.ran
    assert cpu.cases == ()
    assert report.backends == (2, 2)
    assert report.verdict == "OK"
    assert report.complete
    assert report.last_words == ""


def test_ansi_codes_are_stripped_everywhere() -> None:
    raw = text("h200-cuda0.console.txt")
    assert "\x1b[1;32mOK\x1b[0m" in raw
    assert "\x1b" not in strip_ansi(raw)
    report = console("h200-cuda0-fail.console.txt")
    for d in report.devices:
        assert "\x1b" not in d.status
        for c in d.cases:
            assert "\x1b" not in f"{c.params}{c.message}{c.reason}{c.interleaved}"


def test_the_real_cpu_captures() -> None:
    report = console("cpu.console.txt")
    cpu = report.device("CPU")
    assert cpu is not None
    assert (len(cpu.cases), cpu.summary, cpu.status, report.backends, report.verdict) == (36, (36, 36), "OK", (1, 1), "OK")
    assert [c.name for c in cpu.cases] == [c.name for c in console("h200-cuda0.console.txt").devices[0].cases]


@pytest.mark.parametrize(
    ("name", "skip"),
    [("cpu-no-b.console.txt", "Skipping CPU backend"), ("cpu-b-nope.console.txt", "Skipping")],
)
def test_a_skipped_device_says_so_and_still_reads_ok(name: str, skip: str) -> None:
    report = console(name)
    [cpu] = report.devices
    assert (cpu.name, cpu.skipped, cpu.cases, cpu.summary, cpu.status) == ("CPU", skip, (), None, "")
    assert (report.backends, report.verdict) == ((1, 1), "OK")


def test_every_device_skipped() -> None:
    report = console("h200-rocm0-skipped.console.txt")
    assert [(d.name, d.skipped) for d in report.devices] == [("CUDA0", "Skipping"), ("CPU", "Skipping")]
    assert report.device("ROCm0") is None
    assert report.verdict == "OK"


def test_failures_carry_the_message_printed_before_them() -> None:
    report = console("h200-cuda0-fail.console.txt")
    cuda = report.device("CUDA0")
    assert cuda is not None
    failed = [c for c in cuda.cases if c.status is CaseMark.FAIL]
    assert [(c.line, c.message) for c in failed] == [
        (18, "[GATED_DELTA_NET] ERR = 0.012300000 > 0.000500000"),
        (29, "[GATED_DELTA_NET] NaN at index 17 (CUDA0=nan CPU=0.318254)"),
        (41, "[GATED_DELTA_NET] inf mismatch: CUDA0=inf CPU=1.250000"),
    ]
    assert failed[1].params == "type=f32,head_count=4,head_size=64,n_seq_tokens=1,n_seqs=2,v_repeat=1,permuted=0,kda=1,K=1"
    assert cuda.failing == tuple(c.name for c in failed)
    assert (cuda.summary, cuda.status, report.backends, report.verdict) == ((33, 36), "FAIL", (1, 2), "FAIL")
    assert sum(c.status is CaseMark.OK for c in cuda.cases) == 33


def test_one_failure_on_a_cpu_only_build() -> None:
    report = console("cpu-fail.console.txt")
    cpu = report.device("CPU")
    assert cpu is not None
    assert (cpu.summary, len(cpu.failing), cpu.status, report.backends, report.verdict) == ((35, 36), 1, "FAIL", (0, 1), "FAIL")


def test_an_aborted_run_keeps_the_cases_seen_and_its_last_words() -> None:
    report = console("h200-cuda0-abort.console.txt")
    assert not report.complete
    assert report.backends is None
    cuda = report.device("CUDA0")
    assert cuda is not None
    assert [c.status for c in cuda.cases] == [CaseMark.OK] * 12 + [CaseMark.NO_STATUS]
    assert cuda.cases[-1].interleaved == derive.ABORT_LINE
    assert report.last_words == derive.ABORT_LINE
    assert cuda.summary is None


def test_a_run_cut_off_after_a_case_line() -> None:
    report = console("h200-cuda0-cut.console.txt")
    cuda = report.device("CUDA0")
    assert cuda is not None
    assert not report.complete
    assert [c.status for c in cuda.cases] == [CaseMark.OK] * 20 + [CaseMark.NO_STATUS]
    assert report.last_words == ""


def test_stderr_between_a_case_and_its_status() -> None:
    report = console("h200-cuda0-interleaved.console.txt")
    cuda = report.device("CUDA0")
    assert cuda is not None
    assert len(cuda.cases) == 36
    assert {c.status for c in cuda.cases} == {CaseMark.OK}
    assert [c.name for c in cuda.cases] == [c.name for c in console("h200-cuda0.console.txt").devices[0].cases]
    assert cuda.cases[1].interleaved == "ggml_backend_cuda_graph_compute: CUDA graph warmup complete | ggml_backend_cuda_graph_compute: CUDA graph warmup complete"
    assert report.complete
    assert cuda.summary == (36, 36)


def test_not_supported_cases() -> None:
    cuda = console("h200-cuda0-unsupported.console.txt").device("CUDA0")
    assert cuda is not None
    unsupported = [c for c in cuda.cases if c.status is CaseMark.NOT_SUPPORTED]
    assert [(c.reason, c.ran) for c in unsupported] == [("CUDA0", False), ("CUDA0", False)]
    assert cuda.summary == (34, 34)


def test_an_allocation_failure_has_no_case_line() -> None:
    cuda = console("h200-cuda0-alloc.console.txt").device("CUDA0")
    assert cuda is not None
    assert len(cuda.cases) == 35
    assert cuda.failing[0] not in {c.name for c in cuda.cases}
    assert cuda.cases[2].message == "failed to allocate tensors [CUDA0]"
    assert cuda.cases[2].status is CaseMark.OK


def test_perf_output_is_recognised() -> None:
    report = console("h200-cuda0.perf.txt")
    assert report.mode == "perf"


@pytest.mark.parametrize("garbage", ["", "hello\nworld\n", "Usage: test-backend-ops [mode] [options]\n"])
def test_output_that_is_no_report(garbage: str) -> None:
    report = parse_console(garbage)
    assert (report.device_count, report.devices, report.complete) == (None, (), False)


def test_the_fork_sql_capture() -> None:
    report = sql("h200-cuda0-rocmfpx-c14872f.sql.txt")
    assert report.has_header
    assert report.malformed == ()
    assert len(report.rows) == 36
    assert report.commits() == ("c14872f-dirty",)
    assert {(r.backend_name, r.op_name, r.test_mode, r.supported, r.passed, r.error_message) for r in report.rows} == {("CUDA0", OP, "test", True, True, "")}
    # the fork and upstream print the same 36 cases, in the same order
    assert [r.name for r in report.rows] == [c.name for c in console("h200-cuda0.console.txt").devices[0].cases]


def test_the_real_cpu_sql_capture() -> None:
    report = sql("cpu.sql.txt")
    assert report.commits() == ("unknown",)  # pip builds llama.cpp from an sdist: no git, no commit
    assert {r.backend_name for r in report.rows} == {"CPU"}
    assert len(report.rows) == 36


def test_sql_rows_that_cannot_be_read() -> None:
    lines = text("h200-cuda0-rocmfpx-c14872f.sql.txt").splitlines()
    last = len(lines)
    cut = "\n".join([*lines[:-1], lines[-1][:120]])
    assert parse_sql(cut).malformed == (last,)
    assert len(parse_sql(cut).rows) == 35
    quoted = text("h200-cuda0-rocmfpx-c14872f.sql.txt").replace("'test', '1', '1', ''", "'test', '1', '0', 'it's', 'odd'", 1)
    report = parse_sql(quoted)
    assert len(report.malformed) == 1
    assert len(report.rows) == 35
    assert not parse_sql("INSERT INTO nothing\n").has_header


def test_sql_failed_and_unsupported_rows() -> None:
    base = text("h200-cuda0-rocmfpx-c14872f.sql.txt")
    changed = base.replace("'test', '1', '1', ''", "'test', '1', '0', 'test failed'", 1).replace("'test', '1', '1', ''", "'test', '0', '0', 'not supported'", 1)
    rows = parse_sql(changed).rows
    assert (rows[0].supported, rows[0].passed, rows[0].error_message) == (True, False, "test failed")
    assert (rows[1].supported, rows[1].passed, rows[1].error_message) == (False, False, "not supported")
    assert all(r.passed for r in rows[2:])
