"""C, C++ and CUDA sources: the ``#if``/``#elif`` conditions on ``__CUDA_ARCH__`` that tell
``from_cc`` from ``cc`` (docs/ARCHITECTURE.md, "scan").

Each directive that says ``__CUDA_ARCH__`` is evaluated twice, with ``__CUDA_ARCH__`` = major
* 100 + minor * 10 of ``from_cc`` and of ``cc``, as device code is compiled for each; it is a
finding when the two values differ (``#if __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200``).
Each directive is judged alone, as a Python gate is.  Integer literals, ``__CUDA_ARCH__``,
``defined(__CUDA_ARCH__)``, ``true``/``false`` and C's operators are evaluated; every other
macro (``__CUDACC_VER_MAJOR__``, nvcc's feature macros, function-like macros) is unknown, and
``&&``, ``||``, ``?:`` combine known and unknown values as Kleene's logic does.  A condition is
a finding only when the ``__CUDA_ARCH__`` parts alone decide it.

A condition names the cc (``Finding.names_cc``, the class ``aware``) when a macro of its ``#if``
chain says so (``__CUDA_ARCH_FEAT_SM120_ALL``) or compares ``__CUDA_ARCH__`` with a value of the
cc's major in a way that holds for it (``== 1200``, ``>= 1200``); a bound the cc fails (``< 1200``)
is how these sources shut it out, and stays unaware.

Comments, raw strings and line splices are handled; one pass of ``re`` over the file and one
parse per directive: linear in the file's size.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from typing import Literal

from patchkit.cc import CC, Key
from patchkit.rewrite.capability import pair
from patchkit.scan.classify import words
from patchkit.scan.finding import PREPROCESSOR, Finding, short

EXTENSIONS = (".cu", ".cuh", ".h", ".hpp", ".cpp")
NEEDLE = b"__CUDA_ARCH__"
ARCH = "__CUDA_ARCH__"

# Comments, string and character literals, raw strings: what a directive cannot start in.
_LEXEMES = (
    rb"/\*.*?(?:\*/|\Z)"
    rb"|//(?:\\(?:\r\n|.)|[^\n\\])*"
    rb"|\"(?:\\.|[^\"\\\n])*\"?"
    rb"|'(?:\\.|[^'\\\n])*'?"
)
_LEXEME = re.compile(_LEXEMES, re.S)
# ... with raw strings, R"x( ... )x": the look-behind costs 3x, so only for files that say R".
_LEXEME_RAW = re.compile(
    rb"(?<![A-Za-z0-9_])(?:u8|u|U|L)?R\"([^()\\\s\"]{0,16})\(.*?(?:\)\1\"|\Z)|" + _LEXEMES, re.S
)
_COMMENT = re.compile(rb"/\*.*?(?:\*/|\Z)|//[^\n]*", re.S)
_SPLICE = re.compile(rb"\\\r?\n")
_DIRECTIVE = re.compile(rb"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|elifdef|elifndef|else|endif)(?![A-Za-z0-9_])", re.M)
_OPENS = ("if", "ifdef", "ifndef")
_DEFINED = {"ifdef": "defined({})", "elifdef": "defined({})", "ifndef": "!defined({})", "elifndef": "!defined({})"}
_TOKEN = re.compile(
    r"\s*(?:(0[xX][0-9a-fA-F]+|[0-9]+)[uUlL]*(?![A-Za-z0-9_])|([A-Za-z_][A-Za-z0-9_]*)"
    r"|(&&|\|\||==|!=|<=|>=|<<|>>|[-+*/%<>()!~&|^?:,])|('(?:\\.|[^'\\])*'))"
)
_MAX_DEPTH = 200


class _Undecidable(Exception):
    """A condition this evaluator cannot read (a syntax it does not know, too deep)."""


# --- the expression ----------------------------------------------------------------------

_BINARY: dict[str, tuple[int, Callable[[int, int], int | None]]] = {  # operator: (precedence, function of two known ints)
    "||": (1, lambda x, y: int(bool(x or y))),  # (not called: _node_value reads || and && as Kleene's logic)
    "&&": (2, lambda x, y: int(bool(x and y))),
    "|": (3, lambda x, y: x | y),
    "^": (4, lambda x, y: x ^ y),
    "&": (5, lambda x, y: x & y),
    "==": (6, lambda x, y: int(x == y)),
    "!=": (6, lambda x, y: int(x != y)),
    "<": (7, lambda x, y: int(x < y)),
    ">": (7, lambda x, y: int(x > y)),
    "<=": (7, lambda x, y: int(x <= y)),
    ">=": (7, lambda x, y: int(x >= y)),
    "<<": (8, lambda x, y: x << y if 0 <= y < 64 else None),
    ">>": (8, lambda x, y: x >> y if 0 <= y < 64 else None),
    "+": (9, lambda x, y: x + y),
    "-": (9, lambda x, y: x - y),
    "*": (10, lambda x, y: x * y),
    "/": (10, lambda x, y: int(x / y) if y else None),
    "%": (10, lambda x, y: x - y * int(x / y) if y else None),
}
_UNARY: dict[str, Callable[[int], int]] = {"!": lambda x: int(not x), "~": lambda x: ~x, "-": lambda x: -x, "+": lambda x: x}

# A token, and a node of a condition's tree: ("num", 1200), ("name", "__CUDA_ARCH__"), ("defined", name),
# ("call", name), ("unknown", text), ("un", op, x), ("bin", op, x, y), ("cond", c, yes, no).
_Token = tuple[Literal["num"], int] | tuple[Literal["name", "op", "unknown"], str]
_Leaf = tuple[Literal["num"], int] | tuple[Literal["name", "defined", "call", "unknown"], str]
Node = _Leaf | tuple[Literal["un"], str, "Node"] | tuple[Literal["bin"], str, "Node", "Node"] \
    | tuple[Literal["cond"], "Node", "Node", "Node"]


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos:].strip():
                raise _Undecidable(text[pos:])
            break
        pos = m.end()
        num, name, op, char = m.groups()
        if num is not None:
            out.append(("num", int(num, 16) if num[:2] in ("0x", "0X") else int(num, 8) if num[0] == "0" else int(num)))
        elif name is not None:
            out.append(("name", name))
        elif op is not None:
            out.append(("op", op))
        else:
            out.append(("unknown", char))
    return out


class _Parser:
    """Precedence climbing over the tokens; nodes are tuples."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self) -> _Token | tuple[None, None]:
        return self.tokens[self.i] if self.i < len(self.tokens) else (None, None)

    def take(self, op: str | None = None) -> _Token:
        tok = self.peek()
        if tok[0] is None or (op is not None and tok != ("op", op)):
            raise _Undecidable(f"expected {op!r}")
        self.i += 1
        return tok

    def expression(self, depth: int = 0) -> Node:
        if depth > _MAX_DEPTH:
            raise _Undecidable("too deep")
        cond = self.binary(1, depth)
        if self.peek() == ("op", "?"):
            self.take("?")
            yes = self.expression(depth + 1)
            self.take(":")
            return ("cond", cond, yes, self.expression(depth + 1))
        return cond

    def binary(self, level: int, depth: int) -> Node:
        left = self.unary(depth)
        while True:
            tok = self.peek()
            if tok[0] != "op" or tok[1] not in _BINARY or _BINARY[tok[1]][0] < level:
                return left
            op = tok[1]
            self.take()
            right = self.binary(_BINARY[op][0] + 1, depth + 1)
            left = ("bin", op, left, right)

    def unary(self, depth: int) -> Node:
        if depth > _MAX_DEPTH:
            raise _Undecidable("too deep")
        tok = self.take()
        if tok[0] == "num":
            return ("num", tok[1])
        kind, value = tok
        if kind == "op" and value in _UNARY:
            return ("un", value, self.unary(depth + 1))
        if kind == "op" and value == "(":
            inner = self.expression(depth + 1)
            self.take(")")
            return inner
        if kind == "unknown":
            return ("unknown", value)
        if kind == "name":
            if value == "defined":
                paren = self.peek() == ("op", "(")
                if paren:
                    self.take("(")
                named = self.take()
                if named[0] != "name":
                    raise _Undecidable("defined of no name")
                if paren:
                    self.take(")")
                return ("defined", named[1])
            if self.peek() == ("op", "("):  # a function-like macro: unknown, whatever its arguments
                self.take("(")
                level = 1
                while level:
                    tok = self.take()
                    level += 1 if tok == ("op", "(") else -1 if tok == ("op", ")") else 0
                return ("call", value)
            return ("name", value)
        raise _Undecidable(f"unexpected {value!r}")


def parse(text: str) -> Node:
    """The condition ``text`` as a tree; raises ``_Undecidable`` for one this does not read."""
    p = _Parser(_tokens(text))
    tree = p.expression()
    if p.i != len(p.tokens):
        raise _Undecidable("trailing tokens")
    return tree


def _node_value(node: Node, arch: int, operands: list[int | None]) -> int | None:
    """One node's value from its operands' values (None: unknown)."""
    if node[0] == "num":
        return node[1]
    if node[0] == "name":
        return arch if node[1] == ARCH else {"true": 1, "false": 0}.get(node[1])
    if node[0] == "defined":
        return 1 if node[1] == ARCH else None
    if node[0] == "call" or node[0] == "unknown":
        return None
    if node[0] == "un":
        return None if operands[0] is None else _UNARY[node[1]](operands[0])
    if node[0] == "cond":
        c, yes, no = operands
        if c is None:
            return yes if yes is not None and yes == no else None
        return yes if c else no
    op, (x, y) = node[1], operands
    if op == "&&":
        if x == 0 or y == 0:
            return 0
        return 1 if x is not None and y is not None else None
    if op == "||":
        if (x is not None and x != 0) or (y is not None and y != 0):
            return 1
        return 0 if x is not None and y is not None else None
    return None if x is None or y is None else _BINARY[op][1](x, y)


def evaluate(tree: Node, arch: int) -> int | None:
    """The value of the condition with ``__CUDA_ARCH__`` = ``arch``; None: unknown.
    Without recursion: ``a || b || ...`` of thousands of terms is a tree that deep."""
    values: dict[int, int | None] = {}
    for node in reversed(list(_walk(tree))):  # operands before the node they belong to
        operands = [values[id(n)] for n in node[1:] if isinstance(n, tuple)]
        values[id(node)] = _node_value(node, arch, operands)
    return values[id(tree)]


def _walk(tree: Node) -> Iterator[Node]:
    """The nodes of ``tree``, each before its operands, left before right."""
    stack: list[Node] = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed([n for n in node[1:] if isinstance(n, tuple)]))


def arch_literals(tree: Node) -> list[tuple[str, int, bool]]:
    """(operator, number, __CUDA_ARCH__ on the left?) of each comparison of ``__CUDA_ARCH__``
    with an integer literal, in source order."""
    out: list[tuple[str, int, bool]] = []
    for node in _walk(tree):
        if node[0] == "bin" and node[1] in ("==", "!=", "<", "<=", ">", ">="):
            left, right = node[2], node[3]
            if left == ("name", ARCH) and right[0] == "num":
                out.append((node[1], right[1], True))
            elif right == ("name", ARCH) and left[0] == "num":
                out.append((node[1], left[1], False))
    return out


def arch_value(c: CC) -> int:
    """``__CUDA_ARCH__`` when compiling for ``c``: 10 -> 1000, "12.1" -> 1210."""
    return c.major * 100 + c.minor * 10


# --- the file ----------------------------------------------------------------------------


def _spans(src: bytes) -> tuple[list[int], list[int]]:
    """Starts and ends of the comments and literals that go over more than one line."""
    starts, ends = [], []
    for m in (_LEXEME_RAW if b'R"' in src else _LEXEME).finditer(src):
        s, e = m.span()
        if src.find(b"\n", s, e) >= 0:
            starts.append(s)
            ends.append(e)
    return starts, ends


def _inside(starts: list[int], ends: list[int], pos: int) -> int | None:
    """The end of the multi-line lexeme that holds ``pos``, or None."""
    i = bisect.bisect_right(starts, pos) - 1
    return ends[i] if i >= 0 and pos < ends[i] else None


def _logical_end(src: bytes, pos: int, starts: list[int], ends: list[int]) -> int:
    """The end of the directive's logical line from ``pos``: splices and comments continue it."""
    while True:
        nl = src.find(b"\n", pos)
        if nl < 0:
            return len(src)
        end = _inside(starts, ends, nl)
        if end is not None:
            pos = end
            continue
        j = nl - 1 - (nl > 0 and src[nl - 1 : nl] == b"\r")
        if j >= 0 and src[j : j + 1] == b"\\":
            pos = nl + 1
            continue
        return nl


def _continues(src: bytes, start: int) -> bool:
    """Is the line at ``start`` spliced onto the one before (which ends with a backslash)?"""
    j = start - 2  # the byte before the previous line's newline
    if j >= 0 and src[j] == 13:  # "\r\n"
        j -= 1
    return j >= 0 and src[j] == 92  # "\\"


def _literal_names(tree: Node, target: CC) -> bool:
    """Does the condition compare ``__CUDA_ARCH__`` with a value of the cc's major, in a way
    that holds for the cc?"""
    low, value = target.major * 100, arch_value(target)
    for op, number, arch_left in arch_literals(tree):
        if low <= number <= low + 99:
            x, y = (value, number) if arch_left else (number, value)
            if _BINARY[op][1](x, y):
                return True
    return False


def scan(source: bytes, path: str, from_cc: Key, cc: Key) -> tuple[list[Finding], bool]:
    """(findings in line order, read?) of one C/C++/CUDA file.  Pure; never raises for the
    file's content (a directive it cannot read is no finding).

    The class is judged over an ``#if``'s whole chain, as for a Python ``if``/``elif``
    chain: a ``#elif`` that excludes the cc is aware when its ``#if`` names the cc.
    """
    a, b = pair(from_cc, cc)
    if a == b or NEEDLE not in source:
        return [], False
    starts, ends = _spans(source)
    arches = arch_value(a), arch_value(b)
    word = words(b.major)
    chains: list[bool] = []  # per #if chain: does one of its conditions name the cc?
    open_chains: list[int] = []
    pending = []
    line, counted, done = 1, 0, 0
    for m in _DIRECTIVE.finditer(source):
        start = m.start()
        if start < done or _continues(source, start) or _inside(starts, ends, start) is not None:
            continue  # inside a directive's logical line or another spliced line, or in a comment
        end = done = _logical_end(source, m.end(), starts, ends)
        keyword = m.group(1).decode()
        if keyword == "endif":
            if open_chains:
                open_chains.pop()
            continue
        if keyword in _OPENS or not open_chains:
            open_chains.append(len(chains))
            chains.append(False)
        chain = open_chains[-1]
        if keyword == "else":
            continue
        body = _COMMENT.sub(b" ", _SPLICE.sub(b"", source[m.end() : end])).decode("utf-8", "replace")
        text = " ".join(body.split())
        if word.search(text):
            chains[chain] = True
        if ARCH not in text:
            continue
        try:
            tree = parse(_DEFINED[keyword].format(text) if keyword in _DEFINED else text)
            values = [evaluate(tree, arch) for arch in arches]
        except (_Undecidable, RecursionError, ValueError):
            continue
        if _literal_names(tree, b):
            chains[chain] = True
        if None in values or bool(values[0]) == bool(values[1]):
            continue
        line += source.count(b"\n", counted, start)
        counted = start
        literals = tuple(number for _, number, _ in arch_literals(tree))
        pending.append((line, f"#{keyword} {text}", literals, chain))
    found = [Finding(path, n, PREPROCESSOR, short(text), literals, ARCH, False, chains[chain])
             for n, text, literals, chain in pending]
    return found, True
