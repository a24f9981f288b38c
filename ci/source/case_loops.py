"""The loops of test-backend-ops' ``make_test_cases_eval()`` run to count the cases an op's test struct is built in
(:mod:`ci.source.op_cases` finds the struct and the function): statements parsed from tokens, loops over a brace
list or an integer range and ifs on their variables run with integer values, and anything else around a case (a
bound that is not a number here, ``while``, a lambda, a ``continue`` it cannot place) raised as
:class:`NotFollowed`, never guessed past."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

EVAL_FUNCTION = "make_test_cases_eval"
STEP_BUDGET = 2_000_000  # statements run while counting: a loop the reader cannot finish is unknown, not a hang

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_FOLLOWED = "a case of {op} is {where}, which this reader does not follow"
TOO_LONG = "the loops around {op}'s cases run more than {budget} steps"


class NotFollowed(Exception):
    """Why a count cannot be derived: the source does something this reader does not run."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def count_built(body: str, struct: str, op: str) -> int:
    """How many times the function ``body`` (comments and strings blanked) builds ``struct``, its loops run."""
    tokens = list(_tokens(body))
    return _Runner(struct, op).total(_Parser(tokens).block_items(len(tokens)))


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
        raise NotFollowed(f"unbalanced {open_} in {EVAL_FUNCTION}()")

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
            raise NotFollowed(NOT_FOLLOWED.format(op=self.op, where="after a continue or break outside a loop")) from None
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
            raise NotFollowed(TOO_LONG.format(op=self.op, budget=STEP_BUDGET))

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
            raise NotFollowed(NOT_FOLLOWED.format(op=self.op, where=f"inside a {stmt.word} loop"))
        elif stmt.kind == "if":
            cond = _value(stmt.tokens, env)
            if cond is None:
                raise NotFollowed(NOT_FOLLOWED.format(op=self.op, where=f"under if ({' '.join(stmt.tokens)})"))
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
            raise NotFollowed(NOT_FOLLOWED.format(op=self.op, where="inside a lambda"))
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
            raise NotFollowed(NOT_FOLLOWED.format(op=self.op, where=f"in a loop over {' '.join(seq)}"))
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
            raise NotFollowed(where)
        init, cond, step = parts
        eq = _top_level(init, "=")
        if eq is None or eq < 1:
            raise NotFollowed(where)
        var = init[eq - 1]
        inner = dict(env)
        inner[var] = _value(init[eq + 1 :], env)
        while True:
            self._step()
            going = _value(cond, inner)
            if going is None:
                raise NotFollowed(NOT_FOLLOWED.format(op=self.op, where=f"in a loop for ({' '.join(stmt.tokens)}) whose bound is not a number here"))
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
