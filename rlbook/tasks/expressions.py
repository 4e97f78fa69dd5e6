"""A small, bounded arithmetic-expression parser for Countdown answers.

A model's answer is untrusted text, so it is never handed to ``eval``. It is parsed by a
recursive-descent parser for the grammar

    sum     := product (("+" | "-") product)*
    product := atom (("*" | "/") atom)*
    atom    := INTEGER | "(" sum ")"

and evaluated with exact rationals (``fractions.Fraction``), so ``7/2*2`` is exactly 7 and no
rounding can make a wrong answer look right. There is no unary minus and no power operator
(``**`` and ``^`` are syntax errors): Countdown needs neither, and powers are how a hostile string
asks for a number with a billion digits.

Every piece of work is bounded before it starts:

* ``MAX_EXPRESSION_CHARS`` characters at most. This also bounds the tree: at most 100 numbers and
  99 operators, so every recursive walk over a parsed tree is at most 100 calls deep.
* ``MAX_LITERAL_DIGITS`` digits per integer, so values stay small enough to compute exactly.
* ``MAX_NESTING`` levels of parentheses, checked before each recursive descent.

A parsed expression is a tree: a leaf is an ``int``; an inner node is a tuple
``(op, left, right)`` with ``op`` one of ``+ - * /``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Union

MAX_EXPRESSION_CHARS = 200
MAX_LITERAL_DIGITS = 12
MAX_NESTING = 32

OPERATORS = "+-*/"
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
DIGITS = "0123456789"  # ASCII only: str.isdigit() would also accept digits such as "٣"
WHITESPACE = " \t\r\n"

Node = Union[int, tuple]


class ExpressionError(ValueError):
    """The text is not an expression this parser accepts (syntax, or a bound exceeded)."""


def tokenize(text: str) -> list[str]:
    """Split ``text`` into integer literals, operators and parentheses; whitespace is dropped.

    Literals are ASCII digit runs of at most ``MAX_LITERAL_DIGITS`` digits, written without
    leading zeros ("07" is refused: a Countdown number is written as the question writes it).
    """
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    tokens = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in WHITESPACE:
            i += 1
        elif char in OPERATORS or char in "()":
            tokens.append(char)
            i += 1
        elif char in DIGITS:
            end = i
            while end < len(text) and text[end] in DIGITS:
                end += 1
            tokens.append(_checked_literal(text[i:end]))
            i = end
        else:
            raise ExpressionError(f"unexpected character {char!r}")
    return tokens


def _checked_literal(literal: str) -> str:
    if len(literal) > MAX_LITERAL_DIGITS:
        raise ExpressionError(f"integer with more than {MAX_LITERAL_DIGITS} digits")
    if len(literal) > 1 and literal[0] == "0":
        raise ExpressionError(f"integer with a leading zero: {literal}")
    return literal


class _Parser:
    """Recursive descent over a token list; ``nesting`` counts open parentheses."""

    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        self.position = 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ExpressionError("expression ends too early")
        self.position += 1
        return token

    def parse(self) -> Node:
        tree = self.sum(nesting=0)
        if self.peek() is not None:
            raise ExpressionError(f"unexpected {self.peek()!r}")
        return tree

    def sum(self, nesting: int) -> Node:
        tree = self.product(nesting)
        while self.peek() in ("+", "-"):
            op = self.take()
            tree = (op, tree, self.product(nesting))
        return tree

    def product(self, nesting: int) -> Node:
        tree = self.atom(nesting)
        while self.peek() in ("*", "/"):
            op = self.take()
            tree = (op, tree, self.atom(nesting))
        return tree

    def atom(self, nesting: int) -> Node:
        token = self.take()
        if token == "(":
            if nesting >= MAX_NESTING:
                raise ExpressionError(f"more than {MAX_NESTING} nested parentheses")
            tree = self.sum(nesting + 1)
            if self.take() != ")":
                raise ExpressionError("missing ')'")
            return tree
        if token[0] in DIGITS:
            return int(token)
        raise ExpressionError(f"expected a number or '(', got {token!r}")


def parse_expression(text: str) -> Node:
    """Parse ``text`` into an expression tree; raise ``ExpressionError`` if it is not one."""
    return _Parser(tokenize(text)).parse()


def evaluate(tree: Node) -> Fraction:
    """The exact value of ``tree``; raises ``ZeroDivisionError`` on division by zero."""
    if isinstance(tree, int):
        return Fraction(tree)
    op, left, right = tree
    return apply_operator(op, evaluate(left), evaluate(right))


def apply_operator(op: str, a: Fraction, b: Fraction) -> Fraction:
    """``a op b`` exactly, for op in + - * /; raises ``ZeroDivisionError`` when dividing by zero."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return a / b


def numbers_in(tree: Node) -> list[int]:
    """The integer literals of ``tree``, left to right."""
    if isinstance(tree, int):
        return [tree]
    _, left, right = tree
    return numbers_in(left) + numbers_in(right)


def render(tree: Node) -> str:
    """Write ``tree`` as text with the fewest parentheses that keep ``parse(render(t)) == t``.

    A left operand is bracketed when it binds more loosely than its operator; a right operand
    also when it binds equally (``a-(b-c)``, and for regularity ``a+(b+c)`` too).
    """
    if isinstance(tree, int):
        return str(tree)
    op, left, right = tree
    return f"{_operand(left, op, is_right=False)}{op}{_operand(right, op, is_right=True)}"


def _operand(tree: Node, parent_op: str, *, is_right: bool) -> str:
    text = render(tree)
    if isinstance(tree, int):
        return text
    looser = PRECEDENCE[tree[0]] < PRECEDENCE[parent_op]
    equal_on_right = is_right and PRECEDENCE[tree[0]] == PRECEDENCE[parent_op]
    return f"({text})" if looser or equal_on_right else text


def steps(tree: Node) -> list[str]:
    """The scratchpad of ``tree``: one line ``a<op>b=value`` per operator, innermost first.

    ``steps(parse_expression("3*5+7")) == ["3*5=15", "15+7=22"]``.
    """
    if isinstance(tree, int):
        return []
    op, left, right = tree
    line = f"{_number_text(evaluate(left))}{op}{_number_text(evaluate(right))}={_number_text(evaluate(tree))}"
    return steps(left) + steps(right) + [line]


def _number_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(value)
