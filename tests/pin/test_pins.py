from __future__ import annotations

import re
from pathlib import Path

import pytest

from ci import schema
from ci.errors import ConfigError
from ci.pin import pins
from tests.support.messages import pattern
from tests.support.project import FORK_URL, PINS_TEMPLATE

SHA = "8abd563db5a3666adbd6eaa50c6826dfbe9abfef"
GOOD = PINS_TEMPLATE.format(url=FORK_URL, commit=SHA)


def load(text: str) -> pins.Pins:
    return pins.parse(text, Path("pins.yaml"))


def at(key: str, problem: str) -> str:
    """pins.yaml's message about ``key``."""
    return schema.AT_KEY.format(file="pins.yaml", key=key, problem=problem)


def bad(key: str, value: object, problem: str) -> str:
    """pins.yaml's message about a value a check refused."""
    return at(key, schema.VALUE_PROBLEM.format(value=schema.describe(value), problem=problem))


def unknown(key: str, meant: str) -> str:
    return at(key, schema.UNKNOWN_KEY.format(suggestion=schema.DID_YOU_MEAN.format(choice=meant)))


def error_of(text: str) -> str:
    from ci.gates.registry import check_expect

    with pytest.raises(ConfigError) as exc:
        check_expect(load(text))  # expect's other keys are the gates' sections: the registry checks their names
    return exc.value.message


def test_loads_the_fork_and_the_expectations() -> None:
    p = load(GOOD)
    assert p.fork.commit == SHA
    assert p.fork.short == "8abd563"
    assert p.fork.reference == "ROCmFPX#2"
    assert p.fork.date == "2026-09-28"
    assert p.submodule == "third_party/llama.cpp-rocmfpx"
    assert p.omit == ("models/", "docs/")
    assert p.expected_cases() == {"GATED_DELTA_NET": 54}


def test_the_repository_pins_yaml_loads() -> None:
    """Its form only: what it pins moves with every bump, and no test may assert that (test_bump_keeps_the_suite_green)."""
    p = pins.load(Path(__file__).parents[2] / "pins.yaml")
    assert pins.SHA_RE.match(p.fork.commit)
    assert p.submodule == "third_party/llama.cpp-rocmfpx"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (f"commit: {SHA}", "commit: b82c8b8", bad("fork.commit", "b82c8b8", pins.NOT_A_FULL_SHA)),
        (f"commit: {SHA}", f"commit: {SHA.upper()}", bad("fork.commit", SHA.upper(), pins.NOT_A_FULL_SHA)),
        (f"url: {FORK_URL}", "url: http://example.invalid/x.git", bad("fork.url", "http://example.invalid/x.git", pins.NOT_AN_HTTPS_URL)),
        ("branch: main", "branch: refs/heads/main", bad("fork.branch", "refs/heads/main", pins.NOT_A_BRANCH_NAME)),
        ("date: 2026-09-28", "date: someday", bad("fork.date", "someday", pins.NOT_A_DATE)),
        ("  reference:", "  refrence:", unknown("fork.refrence", "reference")),
        ("GATED_DELTA_NET: 54", "GATED_DELTA_NET: many", at("expect.backend_ops.GATED_DELTA_NET", schema.NOT_AN_INTEGER.format(value=schema.describe("many")))),
        ("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 0", at("expect.backend_ops.GATED_DELTA_NET", schema.BELOW_MINIMUM.format(value=0, minimum=1))),
        ("GATED_DELTA_NET: 54", "gated_delta_net: 54", at("expect.backend_ops.gated_delta_net", pins.NOT_AN_OP)),
        ("backend_ops:", "backend_opz:", unknown("expect.backend_opz", "backend_ops")),
        ("submodule: third_party/llama.cpp-rocmfpx", "submodule: ../elsewhere", bad("submodule", "../elsewhere", pins.NOT_A_RELATIVE_PATH)),
        ("omit: [models/, docs/]", "omit: models/", at("checkout.omit", schema.NOT_A_LIST_OF_STRINGS.format(value=schema.describe("models/")))),
        ("omit: [models/, docs/]", "omit: [/abs]", at("checkout.omit[0]", pins.OMIT_NOT_RELATIVE.format(path="/abs"))),
    ],
)
def test_every_error_names_the_file_the_key_and_what_was_expected(old: str, new: str, message: str) -> None:
    assert old in GOOD
    assert message in error_of(GOOD.replace(old, new))


@pytest.mark.parametrize("target", ["clean", "all", "-j999", "--target=x", "llama server"])
def test_a_build_target_that_is_no_binary_name_is_refused(target: str) -> None:
    """pins.yaml build.targets reaches cmake --build --target: 'clean' wiped the build, a flag went to the build tool,
    and either failed only after CMake had run (a hostile pass)."""
    text = GOOD + f"build:\n  targets: [llama-server, {target!r}]\n"
    problem = pins.target_problem(target)
    assert problem is not None
    assert at("build.targets[1]", problem) in error_of(text)


def test_a_missing_key_and_an_unknown_section() -> None:
    assert error_of(GOOD.replace("  branch: main\n", "")) == at("fork.branch", schema.REQUIRED)
    assert unknown("forks", "fork") in error_of(GOOD + "forks: {}\n")


def test_not_yaml_and_not_a_mapping() -> None:
    assert pattern(schema.NOT_YAML, file="pins.yaml", where=schema.YAML_AT_LINE.format(line=2)).match(error_of("fork: [unclosed\n"))
    assert error_of("- a list\n") == schema.IN_FILE.format(file="pins.yaml", problem=schema.EXPECTED_MAPPING.format(value="a list"))


def test_a_missing_file_says_where_to_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(pins.NOT_FOUND.format(path=tmp_path / "pins.yaml"))):
        pins.load(tmp_path / "pins.yaml")


def test_edit_changes_only_the_values_comments_and_order_stay() -> None:
    new_sha = "b82c8b8c300906736573d14e23d416c7c346861f"
    out = pins.edit_fork(GOOD, {"commit": new_sha, "reference": "ROCmFPX#4", "date": "2026-12-02"})
    changed = [(a, b) for a, b in zip(GOOD.splitlines(), out.splitlines(), strict=True) if a != b]
    assert changed == [
        (f"  commit: {SHA}", f"  commit: {new_sha}"),
        ('  reference: "ROCmFPX#2"  # a name people use for it', '  reference: "ROCmFPX#4"  # a name people use for it'),
        ("  date: 2026-09-28        # the day it was pinned", "  date: 2026-12-02        # the day it was pinned"),
    ]
    assert load(out).fork.reference == "ROCmFPX#4"


def test_edit_quotes_a_sha_of_decimal_digits_alone() -> None:
    digits = "1" * 40
    assert load(pins.edit_fork(GOOD, {"commit": digits})).fork.commit == digits


def test_expect_archs_defaults_to_the_engine_class_and_is_checked() -> None:
    assert load(GOOD).archs == ("qwen35", "qwen35moe", "qwen3next", "llama")
    given = GOOD.replace("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 54\n  archs: [qwen35, llama]")
    assert load(given).archs == ("qwen35", "llama")
    assert error_of(GOOD.replace("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 54\n  archs: []")).startswith(at("expect.archs", pins.ARCHS_EMPTY))
    assert at("expect.archs[1]", pins.NOT_AN_ARCH.format(arch="Qwen35")) in error_of(
        GOOD.replace("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 54\n  archs: [llama, Qwen35]")
    )
