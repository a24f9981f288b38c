"""How many cases the fork's own test program lists for an op, read from the fork store without a checkout.

pins.yaml's ``expect.backend_ops`` holds a count per op; one carried from another pin would fail later as if a kernel
had. So the count is read from ``tests/test-backend-ops.cpp`` itself: each ``new <struct>(`` of the op's test struct
in ``make_test_cases_eval()``, times the loops around it (run, when over a brace list or an integer range). Anything
else around a case (an unevaluable bound, a ``while``, ``#ifdef``) makes the count **unknown**, with why: never a
guess.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pygit2

from ci.pin.pins import Pins, edit_cases
from ci.source.case_loops import EVAL_FUNCTION, NOT_FOLLOWED, NotFollowed, count_built

TEST_PROGRAM = "tests/test-backend-ops.cpp"

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_PROGRAM = "the pin has no {path}"
NO_FUNCTION = "{path} has no {function}()"
NO_STRUCT = "{path} has no test struct for {op} (no // GGML_OP_{op} comment above a struct, no test_{lower})"
BUILT_ELSEWHERE = "{struct} is built outside {function}() (line {line})"
OUTPUT_VARIES = "{struct} makes its output with {functions}: which op a case runs depends on its arguments"
OUTPUT_UNSEEN = "{struct}'s output is not one ggml call this reader sees (out = ggml_...( or return ggml_...()"
OUTPUT_SHARED = "{other} makes {function}'s output too"
OUTPUT_NAMED = "{struct} names its op {named} (op_desc)"
COUNTED = "{cases} cases"  # a known count, in a report
UNKNOWN = "unknown ({why})"
# pins.yaml's count of an op against the pin's (bump_pin's report, a try's)
COUNT_AGREES = "{cases} cases, as the pin lists"
COUNT_DIFFERS = "pins.yaml says {said}, the pin lists {listed}"
COUNT_UNKNOWN = "pins.yaml says {said}; the pin's count is unknown ({why})"
COUNT_ACCEPTED = "pins.yaml said {said}, the pin lists {listed}: pins.yaml says {listed} now (--accept-counts)"
COUNTS_HEADING = "### test-backend-ops cases: pins.yaml and the pin's " + TEST_PROGRAM  # a bump report's section
COUNT_FROM = " (pins.yaml's {said}: {source})"
REPORT_COUNT = "- `{op}`: {line}"
ACCEPTED_FROM = "the pin's " + TEST_PROGRAM + " at {commit}, written by bump_pin --accept-counts on {date}; not yet run on a device"


@dataclass(frozen=True)
class OpCount:
    """An op's case count in the program: ``cases`` when derived, else None and ``why``."""

    op: str
    cases: int | None
    why: str = ""

    @property
    def known(self) -> bool:
        return self.cases is not None

    def describe(self) -> str:
        return COUNTED.format(cases=self.cases) if self.cases is not None else UNKNOWN.format(why=self.why)


def against(said: int, found: OpCount, accepted: bool = False) -> str:
    """pins.yaml's count ``said`` against the pin's ``found``, in words; ``accepted``: pins.yaml took the pin's."""
    if found.cases is None:
        return COUNT_UNKNOWN.format(said=said, why=found.why)
    if found.cases == said:
        return COUNT_AGREES.format(cases=said)
    return (COUNT_ACCEPTED if accepted else COUNT_DIFFERS).format(said=said, listed=found.cases)


def accept(pins: Pins, text: str, counts: Sequence[OpCount], commit: str, date: str) -> tuple[str, tuple[str, ...]]:
    """pins.yaml's ``text`` with each count the pin lists otherwise replaced by the pin's (an entry's ``from`` saying
    where it came from now), and the ops so taken; ``text`` itself when none differs."""
    taken = {c.op: c.cases for c in counts if c.cases is not None and c.cases != pins.expected_cases()[c.op]}
    if not taken:
        return text, ()
    written = ACCEPTED_FROM.format(commit=commit[:7], date=date)
    return edit_cases(text, taken, {op: written for op in taken if pins.cases_from(op)}), tuple(taken)


def report_lines(pins: Pins, counts: Sequence[OpCount], accepted: Sequence[str]) -> list[str]:
    """A bump report's section: each op's count in pins.yaml against the pin's, where pins.yaml's comes from."""
    lines = [COUNTS_HEADING, ""]
    for found in counts:
        said, source = pins.expected_cases()[found.op], pins.cases_from(found.op)
        where = COUNT_FROM.format(said=said, source=source) if source and found.cases != said else ""
        lines.append(REPORT_COUNT.format(op=found.op, line=against(said, found, found.op in accepted) + where))
    return lines


def counts_at(repo: pygit2.Repository, commit: str, ops: Sequence[str]) -> dict[str, OpCount]:
    """Each op's count in the program at ``commit`` of the fork store ``repo`` (read from the tree: no checkout)."""
    tree = repo[commit].peel(pygit2.Tree)
    try:
        blob = tree[TEST_PROGRAM]
    except KeyError:
        return {op: OpCount(op, None, NO_PROGRAM.format(path=TEST_PROGRAM)) for op in ops}
    program = repo[blob.id]
    assert isinstance(program, pygit2.Blob)
    read = _Program.of(program.data.decode("utf-8", errors="replace"))  # once, for every op
    return {op: _counted(read, op) for op in ops}


def count_cases(text: str, op: str) -> OpCount:
    """``op``'s cases in ``make_test_cases_eval()`` of the program ``text``."""
    return _counted(_Program.of(text), op)


def _counted(program: _Program, op: str) -> OpCount:
    try:
        return OpCount(op, _count(program, op))
    except NotFollowed as exc:
        return OpCount(op, None, exc.why)


@dataclass(frozen=True)
class _Program:
    """What every op's count reads of a program's text, worked out once: its code (comments and strings blanked, the
    preprocessor followed), the spans under a conditional, and each struct's outputs (read with strings kept)."""

    text: str
    code: str
    conditional: list[tuple[int, int, str]]
    outputs: dict[str, tuple[set[str], str | None]]

    @classmethod
    def of(cls, text: str) -> _Program:
        code, conditional = _preprocess(_strip(text))
        return cls(text, code, conditional, _outputs(_preprocess(_strip(text, strings=True))[0]))


# -- the source, made plain: comments, strings and the preprocessor --------------------------------------------------


def _strip(text: str, strings: bool = False) -> str:
    """``text`` with comments and (unless ``strings``) string literals blanked (same length, newlines kept), so
    offsets and lines stay."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        two = text[i : i + 2]
        if two == "//":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif two == "/*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'" and not strings:
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")


def _preprocess(plain: str) -> tuple[str, list[tuple[int, int, str]]]:
    """``plain`` with ``#if 0`` parts (and the ``#else`` of ``#if 1``) blanked; the spans of every other conditional
    part, with its directive, are returned: a case there is compiled or not by the build's settings."""
    lines = plain.splitlines(keepends=True)
    stack: list[tuple[str, bool, str]] = []  # (kind "0" | "1" | "cond", branch taken, directive)
    kept: list[str] = []
    spans: list[tuple[int, int, str]] = []
    offset = 0
    open_at: list[int] = []
    for line in lines:
        m = _DIRECTIVE.match(line)
        if m:
            word, rest = m.group(1), m.group(2).strip()
            if word in ("if", "ifdef", "ifndef"):
                kind = "0" if word == "if" and rest == "0" else "1" if word == "if" and rest == "1" else "cond"
                stack.append((kind, True, f"#{word} {rest}".strip()))
                open_at.append(offset)
            elif word in ("else", "elif") and stack:
                kind, _, directive = stack[-1]
                if kind == "cond":
                    spans.append((open_at[-1], offset, directive))
                    open_at[-1] = offset
                    stack[-1] = ("cond", True, f"#{word} {rest}".strip() if word == "elif" else f"#else of {directive}")
                else:
                    stack[-1] = (kind, False, directive)
            elif word == "endif" and stack:
                kind, _, directive = stack.pop()
                start = open_at.pop()
                if kind == "cond":
                    spans.append((start, offset, directive))
            kept.append(re.sub(r"[^\n]", " ", line))
        else:
            live = all((kind != "0") == taken for kind, taken, _ in stack if kind != "cond")
            kept.append(line if live else re.sub(r"[^\n]", " ", line))
        offset += len(line)
    return "".join(kept), spans


# -- where the op's cases are built ----------------------------------------------------------------------------------


def _struct_of(text: str, op: str) -> str:
    m = re.search(rf"//\s*GGML_OP_{re.escape(op)}\s*\n\s*struct\s+(\w+)\s*:\s*public\s+test_case\b", text)
    if m:
        return m.group(1)
    name = f"test_{op.lower()}"
    if re.search(rf"\bstruct\s+{name}\s*:\s*public\s+test_case\b", text):
        return name
    raise NotFollowed(NO_STRUCT.format(path=TEST_PROGRAM, op=op, lower=op.lower()))


def _body(text: str, function: str) -> tuple[int, int] | None:
    """The span of ``function()``'s body (inside its braces), or None."""
    m = re.search(rf"\b{function}\s*\(\s*\)\s*\{{", text)
    if not m:
        return None
    depth, i = 1, m.end()
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return m.end(), i - 1


_STRUCT = re.compile(r"\bstruct\s+(\w+)\s*:\s*public\s+test_case\s*\{")
_OUTPUT = re.compile(r"(?:\bout\s*=|\breturn)\s*(ggml_\w+)\s*\(")


_OP_DESC = re.compile(r"\bop_desc\s*\([^)]*\)\s*override\s*\{(.*?)\n\s*\}", re.DOTALL)
_RETURN = re.compile(r"\breturn\b([^;]*);")
_LITERAL = re.compile(r'^\s*"([A-Z0-9_]+)"\s*$')


def _outputs(code: str) -> dict[str, tuple[set[str], str | None]]:
    """Each test struct's output functions (``out = ggml_X(`` or ``return ggml_X(``, an ``_inplace`` variant taken
    as its op's) and the name its ``op_desc`` override gives ("" without one, None when it computes it): a struct
    with several outputs makes a different op depending on its arguments (test_rope: ROPE and ROPE_BACK, and -o ROPE
    runs only the first), and one named otherwise is another op's test (test_topk_qsa's TOPK_QSA ends in ggml_top_k)."""
    found: dict[str, tuple[set[str], str | None]] = {}
    for m in _STRUCT.finditer(code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        body = code[m.end() : i]
        desc = _OP_DESC.search(body)
        names = {n.group(1) if (n := _LITERAL.match(r)) else None for r in _RETURN.findall(desc.group(1))} if desc else set()
        named = "" if desc is None else names.pop() if len(names) == 1 else None
        found[m.group(1)] = ({f.removesuffix("_inplace") for f in _OUTPUT.findall(body)}, named)
    return found


def _one_op(outputs: dict[str, tuple[set[str], str | None]], struct: str, op: str) -> None:
    """The struct's cases are all of ``op``, and no other struct's are: else the count is unknown."""
    mine, named = outputs.get(struct, (set(), ""))
    if named not in ("", op):
        raise NotFollowed(OUTPUT_NAMED.format(struct=struct, named=named if named is not None else "a name it computes"))
    if not mine:
        raise NotFollowed(OUTPUT_UNSEEN.format(struct=struct))
    if len(mine) > 1:
        raise NotFollowed(OUTPUT_VARIES.format(struct=struct, functions=", ".join(sorted(mine))))
    (function,) = mine
    others = sorted(name for name, (fns, desc) in outputs.items() if name != struct and function in fns and desc in ("", op, None))
    if others:
        raise NotFollowed(OUTPUT_SHARED.format(other=others[0], function=function))


def _count(program: _Program, op: str) -> int:
    struct = _struct_of(program.text, op)
    code, conditional = program.code, program.conditional
    _one_op(program.outputs, struct, op)
    span = _body(code, EVAL_FUNCTION)
    if span is None:
        raise NotFollowed(NO_FUNCTION.format(path=TEST_PROGRAM, function=EVAL_FUNCTION))
    perf = _body(code, "make_test_cases_perf")
    built = re.compile(rf"\bnew\s+{struct}\b|\bmake_unique\s*<\s*{struct}\s*>")
    for m in built.finditer(code):
        inside = span[0] <= m.start() < span[1] or (perf is not None and perf[0] <= m.start() < perf[1])
        if not inside:
            raise NotFollowed(BUILT_ELSEWHERE.format(struct=struct, function=EVAL_FUNCTION, line=code.count("\n", 0, m.start()) + 1))
        if span[0] <= m.start() < span[1]:
            for start, end, directive in conditional:
                if start <= m.start() < end:
                    raise NotFollowed(NOT_FOLLOWED.format(op=op, where=f"under {directive}"))
    return count_built(code[span[0] : span[1]], struct, op)
