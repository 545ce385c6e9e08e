"""How long the maths checker takes on random, often explosive, expressions.

Draws random LaTeX-ish expressions (powers, towers, roots, fractions, symbols) from a
seeded grammar, keeps those the checker's filter lets through to evaluation, and times
``math_equal(expr, "42")`` on each. Prints one JSON object: how many were drawn and
evaluated, the slowest time and expression, the total. Before scoring was bounded
(sympy evaluated the expressions exactly), the default stream did not finish within 60 s.

    agentqmix bench fuzz-checker --n 20000 --seed 0
"""

from __future__ import annotations

import json
import random
import time

from benchmarks.common import Parser, int_in
from core.tasks.checkers import latex_to_expr, math_equal

ATOMS = ("9", "99", "999", "10", "2", "x", "y", "\\pi", "0.5", "1/3", "\\sqrt{2}", "0")
OPS = ("^", "^", "+", "-", "*", "/", "^{}", "sqrt", "()")


def draw(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(ATOMS)
    op, a, b = rng.choice(OPS), draw(rng, depth - 1), draw(rng, depth - 1)
    if op == "^{}":
        return f"{a}^{{{b}}}"
    if op == "sqrt":
        return f"\\sqrt{{{a}}}"
    if op == "()":
        return f"({a})^({b})"
    return f"{a}{op}{b}"


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_in(1, 10**7), default=20000, help="expressions to draw")
    parser.add_argument("--seed", type=int_in(0, 2**63 - 1), default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    worst, evaluated, start = (0.0, ""), 0, time.perf_counter()
    for _ in range(args.n):
        expr = draw(rng, rng.randint(1, 6))
        if latex_to_expr(expr) is None:
            continue
        evaluated += 1
        t0 = time.perf_counter()
        math_equal(expr, "42")
        worst = max(worst, (time.perf_counter() - t0, expr))
    print(
        json.dumps(
            {
                "drawn": args.n,
                "evaluated": evaluated,
                "slowest_s": round(worst[0], 4),
                "slowest": worst[1],
                "total_s": round(time.perf_counter() - start, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
