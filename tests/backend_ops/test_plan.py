"""The plan is pure: argv and log names, computed without running anything."""

from __future__ import annotations

import pytest

from ci.errors import ConfigError
from ci.gates.backend_ops import spec as bo_spec
from ci.gates.backend_ops.run import GateSpec, plan

BINARY = "build/rocm/bin/test-backend-ops"  # need not exist: nothing runs


def test_one_console_run_per_op_then_one_sql_run() -> None:
    p = plan(BINARY, "ROCm0", ["GATED_DELTA_NET", "FLASH_ATTN_EXT"])
    assert [s.argv for s in p.steps] == [
        (BINARY, "test", "-o", "GATED_DELTA_NET", "-b", "ROCm0"),
        (BINARY, "test", "-o", "FLASH_ATTN_EXT", "-b", "ROCm0"),
        (BINARY, "test", "-o", "GATED_DELTA_NET,FLASH_ATTN_EXT", "-b", "ROCm0", "--output", "sql"),
    ]
    assert [s.log_name for s in p.steps] == [
        "test-backend-ops.ROCm0.GATED_DELTA_NET.log",
        "test-backend-ops.ROCm0.FLASH_ATTN_EXT.log",
        "test-backend-ops.ROCm0.sql",
    ]
    assert [s.op for s in p.console_steps] == ["GATED_DELTA_NET", "FLASH_ATTN_EXT"]
    assert p.sql_step.is_sql
    assert p.ops == ("GATED_DELTA_NET", "FLASH_ATTN_EXT")


@pytest.mark.parametrize(
    ("device", "ops", "message"),
    [
        ("", ["GATED_DELTA_NET"], bo_spec.BAD_DEVICE.format(device="")),
        ("ROCm 0", ["GATED_DELTA_NET"], bo_spec.BAD_DEVICE.format(device="ROCm 0")),
        ("ROCm0", [], bo_spec.NO_EXPECTATIONS),
        ("ROCm0", ["gated_delta_net"], bo_spec.BAD_OP.format(op="gated_delta_net")),
        ("ROCm0", ["ADD", "ADD"], bo_spec.OP_TWICE.format(ops="ADD, ADD")),
    ],
)
def test_bad_plans_are_refused_with_the_reason(device: str, ops: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        plan(BINARY, device, ops)
    assert message in exc.value.message


@pytest.mark.parametrize(
    ("pinned", "expected", "message"),
    [
        ("b82c8", {"GATED_DELTA_NET": 54}, bo_spec.NOT_A_SHA.format(commit="b82c8")),
        ("not-a-sha", {"GATED_DELTA_NET": 54}, bo_spec.NOT_A_SHA.format(commit="not-a-sha")),
        (None, {"GATED_DELTA_NET": 0}, bo_spec.BAD_COUNT.format(op="GATED_DELTA_NET", count=0)),
    ],
)
def test_bad_specs_are_refused(pinned: str | None, expected: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        GateSpec.make("ROCm0", expected, pinned, patched=False)
    assert message in exc.value.message


def test_the_dirty_rule_follows_the_patches_unless_it_is_given() -> None:
    assert GateSpec.make("ROCm0", {"GATED_DELTA_NET": 54}, "8ABD563", patched=True).dirty.value == "dirty"
    assert GateSpec.make("ROCm0", {"GATED_DELTA_NET": 54}, "8abd563", patched=False).dirty.value == "clean"
    from ci.gates.backend_ops.run import DirtyRule

    spec = GateSpec.make("ROCm0", {"GATED_DELTA_NET": 54}, "8abd563", patched=False, dirty=DirtyRule.DIRTY)
    assert spec.dirty is DirtyRule.DIRTY
    assert spec.pinned_commit == "8abd563"
