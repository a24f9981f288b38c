"""How many cases the fork's own test program lists for an op, read from the fork store without a checkout.

test-backend-ops runs the cases ``make_test_cases_eval()`` (``tests/test-backend-ops.cpp``) pushes, and ``-o OP``
keeps those of the op. pins.yaml's ``expect.backend_ops`` holds a count per op; a count carried from another pin
shows up later as a backend_ops FAILED that looks like a kernel failure (a bump to ciru-ai c14872f carried 54 to a
program listing 36). So the count is read here from the program itself: the op's test struct (the one under the
``// GGML_OP_<OP>`` comment, else ``test_<op>``), and each ``new <struct>(`` inside the function, times the loops
around it. Loops over a brace list or an integer range, and ifs whose conditions use only those loop variables and
literals, are followed by running them; anything else around a case (a loop bound the reader cannot evaluate, a
``while``, a lambda, ``#ifdef``, the struct built in another function) makes the count **unknown**, with why: never a
guess.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pygit2

TEST_PROGRAM = "tests/test-backend-ops.cpp"
EVAL_FUNCTION = "make_test_cases_eval"
STEP_BUDGET = 2_000_000  # statements run while counting: a loop the reader cannot finish is unknown, not a hang

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_PROGRAM = "the pin has no {path}"
NO_FUNCTION = "{path} has no {function}()"
NO_STRUCT = "{path} has no test struct for {op} (no // GGML_OP_{op} comment above a struct, no test_{lower})"
NOT_FOLLOWED = "a case of {op} is {where}, which this reader does not follow"
BUILT_ELSEWHERE = "{struct} is built outside {function}() (line {line})"
TOO_LONG = "the loops around {op}'s cases run more than {budget} steps"
OUTPUT_VARIES = "{struct} makes its output with {functions}: which op a case runs depends on its arguments"
OUTPUT_UNSEEN = "{struct}'s output is not one ggml call this reader sees (out = ggml_...( or return ggml_...()"
OUTPUT_SHARED = "{other} makes {function}'s output too"
OUTPUT_NAMED = "{struct} names its op {named} (op_desc)"
COUNTED = "{cases} cases"  # a known count, in a report
UNKNOWN = "unknown ({why})"


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


class _Unknown(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def counts_at(repo: pygit2.Repository, commit: str, ops: Sequence[str]) -> dict[str, OpCount]:
    """Each op's count in the program at ``commit`` of the fork store ``repo`` (read from the tree: no checkout)."""
    tree = repo[commit].peel(pygit2.Tree)
    try:
        blob = tree[TEST_PROGRAM]
    except KeyError:
        return {op: OpCount(op, None, NO_PROGRAM.format(path=TEST_PROGRAM)) for op in ops}
    program = repo[blob.id]
    assert isinstance(program, pygit2.Blob)
    text = program.data.decode("utf-8", errors="replace")
    return {op: count_cases(text, op) for op in ops}


def count_cases(text: str, op: str) -> OpCount:
    """``op``'s cases in ``make_test_cases_eval()`` of the program ``text``."""
    try:
        return OpCount(op, _count(text, op))
    except _Unknown as exc:
        return OpCount(op, None, exc.why)


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
    raise _Unknown(NO_STRUCT.format(path=TEST_PROGRAM, op=op, lower=op.lower()))


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


def _one_op(code: str, struct: str, op: str) -> None:
    """The struct's cases are all of ``op``, and no other struct's are: else the count is unknown."""
    outputs = _outputs(code)
    mine, named = outputs.get(struct, (set(), ""))
    if named not in ("", op):
        raise _Unknown(OUTPUT_NAMED.format(struct=struct, named=named if named is not None else "a name it computes"))
    if not mine:
        raise _Unknown(OUTPUT_UNSEEN.format(struct=struct))
    if len(mine) > 1:
        raise _Unknown(OUTPUT_VARIES.format(struct=struct, functions=", ".join(sorted(mine))))
    (function,) = mine
    others = sorted(name for name, (fns, desc) in outputs.items() if name != struct and function in fns and desc in ("", op, None))
    if others:
        raise _Unknown(OUTPUT_SHARED.format(other=others[0], function=function))


def _count(text: str, op: str) -> int:
    struct = _struct_of(text, op)
    code, conditional = _preprocess(_strip(text))
    _one_op(_preprocess(_strip(text, strings=True))[0], struct, op)
    span = _body(code, EVAL_FUNCTION)
    if span is None:
        raise _Unknown(NO_FUNCTION.format(path=TEST_PROGRAM, function=EVAL_FUNCTION))
    perf = _body(code, "make_test_cases_perf")
    built = re.compile(rf"\bnew\s+{struct}\b|\bmake_unique\s*<\s*{struct}\s*>")
    for m in built.finditer(code):
        inside = span[0] <= m.start() < span[1] or (perf is not None and perf[0] <= m.start() < perf[1])
        if not inside:
            raise _Unknown(BUILT_ELSEWHERE.format(struct=struct, function=EVAL_FUNCTION, line=code.count("\n", 0, m.start()) + 1))
        if span[0] <= m.start() < span[1]:
            for start, end, directive in conditional:
                if start <= m.start() < end:
                    raise _Unknown(NOT_FOLLOWED.format(op=op, where=f"under {directive}"))
    tokens = list(_tokens(code[span[0] : span[1]]))
    statements = _Parser(tokens).block_items(len(tokens))
    return _Runner(struct, op).total(statements)


# -- tokens and statements -------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+[uUlL]*|\d+\.?\d*(?:[eE][-+]?\d+)?[fFuUlL]*|\w+|<<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||\+\+|--|\+=|-=|\*=|/=|::|->|\S)")


def _tokens(code: str) -> Iterator[str]:
    for m in _TOKEN.finditer(code):
        yield m.group(1)


@dataclass(frozen=True)
class _Stmt:
    kind: str  # "simple", "block", "for", "range_for", "if", "jump", "opaque"
    tokens: tuple[str, ...] = ()  # simple: its tokens; for: the header; if: the condition; jump: the word
    body: tuple[_Stmt, ...] = ()
    orelse: tuple[_Stmt, ...] = ()
    word: str = ""  # opaque: the keyword (while, do, switch)


class _Parser:
    def __init__(self, tokens: Sequence[str]) -> None:
        self.t = tokens
        self.i = 0

    def block_items(self, end: int) -> tuple[_Stmt, ...]:
        items = []
        while self.i < end:
            items.append(self.statement())
        return tuple(items)

    def _group(self, open_: str, close: str) -> tuple[str, ...]:
        """The tokens between a balanced ``open_`` at the cursor and its ``close``; the cursor moves past it."""
        assert self.t[self.i] == open_
        depth, start = 0, self.i + 1
        while self.i < len(self.t):
            tok = self.t[self.i]
            depth += 1 if tok == open_ else -1 if tok == close else 0
            self.i += 1
            if depth == 0:
                return tuple(self.t[start : self.i - 1])
        raise _Unknown(f"unbalanced {open_} in {EVAL_FUNCTION}()")

    def statement(self) -> _Stmt:
        tok = self.t[self.i]
        if tok == "{":
            inner = _Parser(self._group("{", "}"))
            return _Stmt("block", body=inner.block_items(len(inner.t)))
        if tok == "for":
            self.i += 1
            header = self._group("(", ")")
            body = self.statement()
            colon = _top_level(header, ":")
            if colon is not None and _top_level(header, ";") is None:
                return _Stmt("range_for", header, (body,))
            return _Stmt("for", header, (body,))
        if tok == "if":
            self.i += 1
            if self.t[self.i] == "constexpr":
                self.i += 1
            cond = self._group("(", ")")
            then = self.statement()
            orelse: tuple[_Stmt, ...] = ()
            if self.i < len(self.t) and self.t[self.i] == "else":
                self.i += 1
                orelse = (self.statement(),)
            return _Stmt("if", cond, (then,), orelse)
        if tok in ("while", "switch"):
            self.i += 1
            self._group("(", ")")
            return _Stmt("opaque", body=(self.statement(),), word=tok)
        if tok == "do":
            self.i += 1
            body = self.statement()
            while self.i < len(self.t) and self.t[self.i] != ";":
                self.i += 1
            self.i += 1
            return _Stmt("opaque", body=(body,), word="do")
        if tok in ("continue", "break", "return"):
            start = self.i
            self._simple_end()
            return _Stmt("jump", tuple(self.t[start : self.i]))
        start = self.i
        self._simple_end()
        return _Stmt("simple", tuple(self.t[start : self.i]))

    def _simple_end(self) -> None:
        depth = 0
        while self.i < len(self.t):
            tok = self.t[self.i]
            self.i += 1
            if tok in "([{":
                depth += 1
            elif tok in ")]}":
                depth -= 1
            elif tok == ";" and depth == 0:
                return


def _top_level(tokens: Sequence[str], what: str) -> int | None:
    depth = 0
    for i, tok in enumerate(tokens):
        if tok in "([{":
            depth += 1
        elif tok in ")]}":
            depth -= 1
        elif tok == what and depth == 0:
            return i
    return None


def _split(tokens: Sequence[str], sep: str = ",") -> list[tuple[str, ...]]:
    parts: list[tuple[str, ...]] = []
    cur: list[str] = []
    depth = 0
    for tok in tokens:
        if tok in "([{":
            depth += 1
        elif tok in ")]}":
            depth -= 1
        if tok == sep and depth == 0:
            parts.append(tuple(cur))
            cur = []
        else:
            cur.append(tok)
    if cur:
        parts.append(tuple(cur))
    return parts


# -- running the loops -----------------------------------------------------------------------------------------------


class _Continue(Exception):
    pass


class _Break(Exception):
    pass


class _Return(Exception):
    pass


Env = dict[str, "int | None"]
_ASSIGN = ("=", "+=", "-=", "*=", "/=", "<<=", ">>=", "++", "--")


class _Runner:
    """Runs the function's statements that can build the struct (or skip past one), adding up its constructions."""

    def __init__(self, struct: str, op: str) -> None:
        self.struct, self.op = struct, op
        self.steps = 0
        self.count = 0
        self.lists: dict[str, list[int | None]] = {}

    def total(self, stmts: Sequence[_Stmt]) -> int:
        try:
            self.block(stmts, {})
        except _Return:
            pass
        except (_Continue, _Break):
            raise _Unknown(NOT_FOLLOWED.format(op=self.op, where="after a continue or break outside a loop")) from None
        return self.count

    def _builds(self, stmt: _Stmt) -> int:
        """How many constructions of the struct ``stmt`` holds, anywhere inside it."""
        if stmt.kind == "simple":
            return sum(1 for a, b in zip(stmt.tokens, stmt.tokens[1:], strict=False) if a in ("new", "<") and b == self.struct)
        return sum(self._builds(s) for s in (*stmt.body, *stmt.orelse))

    def _jumps(self, stmt: _Stmt) -> bool:
        if stmt.kind == "jump":
            return True
        if stmt.kind in ("for", "range_for", "opaque"):
            return False  # a continue or break in a loop of its own is that loop's
        return any(self._jumps(s) for s in (*stmt.body, *stmt.orelse))

    def _step(self) -> None:
        self.steps += 1
        if self.steps > STEP_BUDGET:
            raise _Unknown(TOO_LONG.format(op=self.op, budget=STEP_BUDGET))

    def block(self, stmts: Sequence[_Stmt], env: Env) -> None:
        env = dict(env)  # names declared in a block end with it
        for stmt in stmts:
            self.run(stmt, env)

    def run(self, stmt: _Stmt, env: Env) -> None:
        self._step()
        if stmt.kind == "simple":
            self._simple(stmt, env)
        elif stmt.kind == "block":
            self.block(stmt.body, env)
        elif stmt.kind == "jump":
            raise {"continue": _Continue, "break": _Break}.get(stmt.tokens[0], _Return)
        elif not (self._builds(stmt) or self._jumps(stmt)):
            self._forget_assigned(stmt, env)  # nothing of the op in it: only what it writes matters
        elif stmt.kind == "opaque":
            raise _Unknown(NOT_FOLLOWED.format(op=self.op, where=f"inside a {stmt.word} loop"))
        elif stmt.kind == "if":
            cond = _value(stmt.tokens, env)
            if cond is None:
                raise _Unknown(NOT_FOLLOWED.format(op=self.op, where=f"under if ({' '.join(stmt.tokens)})"))
            for s in stmt.body if cond else stmt.orelse:
                self.run(s, env)
        elif stmt.kind == "range_for":
            self._range_for(stmt, env)
        else:
            self._for(stmt, env)

    def _simple(self, stmt: _Stmt, env: Env) -> None:
        tokens = stmt.tokens
        builds = self._builds(stmt)
        if builds and "{" in tokens and _lambda(tokens):
            raise _Unknown(NOT_FOLLOWED.format(op=self.op, where="inside a lambda"))
        self._declare(tokens, env)
        self.count += builds

    def _declare(self, tokens: Sequence[str], env: Env) -> None:
        """A declaration ``[const] TYPE NAME = EXPR;`` or a list ``TYPE NAME[] = {...}`` (``std::vector<T> NAME =
        {...}``) is remembered; any other write to a remembered name forgets it (its value is then unknown)."""
        eq = _top_level(tokens, "=")
        rhs = tuple(tokens[eq + 1 : -1] if tokens[-1] == ";" else tokens[eq + 1 :]) if eq is not None else ()
        if eq is not None and eq >= 2 and re.fullmatch(r"[A-Za-z_]\w*", tokens[eq - 1]) and tokens[eq - 2] not in (".", "->"):
            name = tokens[eq - 1]
            env[name] = _value(rhs, env)
            if rhs and rhs[0] == "{" and rhs[-1] == "}":
                self.lists[name] = [_value(p, env) for p in _split(rhs[1:-1])]
            return
        if eq is not None and eq >= 4 and tokens[eq - 1] == "]" and tokens[eq - 2] == "[" and rhs and rhs[0] == "{":
            self.lists[tokens[eq - 3]] = [_value(p, env) for p in _split(rhs[1:-1])]
            return
        self._forget_assigned(_Stmt("simple", tuple(tokens)), env)

    def _forget_assigned(self, stmt: _Stmt, env: Env) -> None:
        for s in _walk(stmt):
            for i, tok in enumerate(s.tokens):
                if tok in _ASSIGN:
                    for name in (s.tokens[i - 1] if i else "", s.tokens[i + 1] if i + 1 < len(s.tokens) else ""):
                        if name in env:
                            env[name] = None
                        self.lists.pop(name, None)

    def _body(self, body: _Stmt, env: Env) -> bool:
        """A loop body run once (a continue ends the pass); True when a break ended the loop."""
        try:
            self.run(body, dict(env))
        except _Continue:
            return False
        except _Break:
            return True
        return False

    def _range_for(self, stmt: _Stmt, env: Env) -> None:
        colon = _top_level(stmt.tokens, ":")
        assert colon is not None
        decl, seq = stmt.tokens[:colon], stmt.tokens[colon + 1 :]
        var = decl[-1] if decl and re.fullmatch(r"[A-Za-z_]\w*", decl[-1]) else None
        if seq and seq[0] == "{" and seq[-1] == "}":
            values = [_value(p, env) for p in _split(seq[1:-1])]
        elif len(seq) == 1 and seq[0] in self.lists:
            values = self.lists[seq[0]]
        else:
            raise _Unknown(NOT_FOLLOWED.format(op=self.op, where=f"in a loop over {' '.join(seq)}"))
        for v in values:
            self._step()
            inner = dict(env)
            if var is not None:
                inner[var] = v
            if self._body(stmt.body[0], inner):
                return

    def _for(self, stmt: _Stmt, env: Env) -> None:
        where = NOT_FOLLOWED.format(op=self.op, where=f"in a loop for ({' '.join(stmt.tokens)})")
        parts = _split(stmt.tokens, ";")
        if len(parts) != 3:
            raise _Unknown(where)
        init, cond, step = parts
        eq = _top_level(init, "=")
        if eq is None or eq < 1:
            raise _Unknown(where)
        var = init[eq - 1]
        inner = dict(env)
        inner[var] = _value(init[eq + 1 :], env)
        while True:
            self._step()
            going = _value(cond, inner)
            if going is None:
                raise _Unknown(NOT_FOLLOWED.format(op=self.op, where=f"in a loop for ({' '.join(stmt.tokens)}) whose bound is not a number here"))
            if not going or self._body(stmt.body[0], inner):
                return
            inner[var] = _stepped(step, var, inner)


def _walk(stmt: _Stmt) -> Iterator[_Stmt]:
    yield stmt
    for s in (*stmt.body, *stmt.orelse):
        yield from _walk(s)


def _lambda(tokens: Sequence[str]) -> bool:
    """Whether ``tokens`` define a lambda: ``[...](...) {`` or ``[...] {``."""
    return any(tok == "[" and (i == 0 or tokens[i - 1] in ("=", "(", ",", "return")) for i, tok in enumerate(tokens))


def _stepped(step: Sequence[str], var: str, env: Env) -> int | None:
    value = env.get(var)
    if value is None:
        return None
    s = tuple(step)
    if s in ((var, "++"), ("++", var)):
        return value + 1
    if s in ((var, "--"), ("--", var)):
        return value - 1
    if len(s) >= 3 and s[0] == var and s[1] in ("+=", "-=", "*=", "<<=", ">>="):
        by = _value(s[2:], env)
        if by is None:
            return None
        return {"+=": value + by, "-=": value - by, "*=": value * by, "<<=": value << by, ">>=": value >> by}[s[1]]
    if len(s) >= 3 and s[0] == var and s[1] == "=":
        return _value(s[2:], env)
    return None


# -- integer expressions ---------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*")
_PY_OPS = {"&&": " and ", "||": " or ", "!": " not ", "true": "True", "false": "False"}


def _value(tokens: Sequence[str], env: Mapping[str, int | None]) -> int | None:
    """The integer (or truth) value of a C expression of literals and known names; None when it is not one."""
    if not tokens:
        return None
    words = []
    for tok in tokens:
        m = _NUMBER.fullmatch(tok)
        if m:
            words.append(str(int(m.group(1), 0)))
        elif tok in _PY_OPS:
            words.append(_PY_OPS[tok])
        elif re.fullmatch(r"[A-Za-z_]\w*", tok):
            value = env.get(tok)
            if value is None:
                return None
            words.append(str(int(value)))
        elif tok in ("+", "-", "*", "/", "%", "<<", ">>", "<", ">", "<=", ">=", "==", "!=", "(", ")", "&", "|", "^", "~"):
            words.append(tok)
        else:
            return None  # a cast, a call, a float, a ternary: not followed
    try:
        tree = ast.parse(" ".join(words), mode="eval")
        result = _eval(tree.body)
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError, RecursionError):
        return None
    return int(result)


def _eval(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
        return int(node.value)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Not):
            return int(not v)
        if isinstance(node.op, ast.Invert):
            return ~v
    if isinstance(node, ast.BoolOp):
        values = [_eval(v) for v in node.values]
        return int(all(values)) if isinstance(node.op, ast.And) else int(any(values))
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left), _eval(node.right)
        op = node.op
        if isinstance(op, ast.Div):  # C's integer division truncates toward zero
            return int(a / b) if b else _raise()
        table = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b, ast.BitAnd: a & b, ast.BitOr: a | b, ast.BitXor: a ^ b}
        if type(op) in table:
            return table[type(op)]
        if isinstance(op, ast.Mod):
            return a - b * int(a / b) if b else _raise()
        if isinstance(op, ast.LShift) and 0 <= b < 64:
            return a << b
        if isinstance(op, ast.RShift) and 0 <= b < 64:
            return a >> b
    if isinstance(node, ast.Compare):
        left = _eval(node.left)
        for cmp, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node)
            compared: dict[type[ast.cmpop], bool] = {
                ast.Lt: left < right, ast.LtE: left <= right, ast.Gt: left > right, ast.GtE: left >= right, ast.Eq: left == right, ast.NotEq: left != right,
            }  # fmt: skip
            ok = compared.get(type(cmp))
            if ok is None:
                raise ValueError
            if not ok:
                return 0
            left = right
        return 1
    raise ValueError


def _raise() -> int:
    raise ValueError
