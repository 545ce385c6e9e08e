"""Scoring a response against a task: answer extraction and equivalence (docs/team.md, Tasks).

* Maths: :func:`extract_math_answer` finds the answer a reply commits to (``\\boxed{}``
  with nested braces, else the value after the last ``####`` / "final answer" / "Answer:"
  marker, else a reply that is one value; never a number from the reasoning);
  :func:`math_equal` compares it with the ground truth exactly as a number (ints,
  decimals, fractions, percentages, LaTeX ``\\frac``) and, failing that, as an expression
  (``\\sqrt{8}``, ``2^{10}``, ``(x+1)^2``) evaluated by :func:`eval_expr` at several points.
* Scoring is bounded in time and memory whatever a model writes: expressions are at most
  120 characters and evaluated in 40-digit floating point, a power is computed only after
  its result is known to stay within ``10^±MAX_LOG10``, and numbers longer than
  ``MAX_NUMBER_CHARS`` compare as text. An answer that cannot be evaluated within those
  bounds (``10^{10^{10^{10}}}``) is wrong, never a hang, a crash or a full memory.
* Multiple choice: :func:`extract_choice` finds one option letter (or the option named by
  its text), or ``None`` when the text names none or several.
* :func:`read_answer` is the one reading of a maths or multiple-choice reply that the
  back-ends (``core.backends.prompts.parse_answer``) and :func:`check` share.
* :func:`check` dispatches on ``task.domain``; code goes to :func:`core.tasks.code_checker.check_code`.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

import mpmath

from core.tasks.base import Task

REL_TOL = 1e-6
"""Relative tolerance for numeric equality (answers such as ``0.3333333`` vs ``1/3``)."""

MAX_NUMBER_CHARS = 1000
"""Longest string :func:`parse_number` reads as a number (longer ones compare as text)."""

_NUMBER = r"-?\d+(?:,\d{3})*(?:\.\d+)?|-?\.\d+"
_NUMBER_RE = re.compile(rf"(?<![\w.])(?:{_NUMBER})(?:\s*/\s*\d+)?")


# ----------------------------------------------------------------------------- maths


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), nested braces kept."""
    starts = [m.end() for m in _BOX.finditer(text)]
    return _box_at(text, starts[-1]) if starts else None


_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _box_at(text: str, start: int) -> str | None:
    """Content of the box that opens just before ``start``, or ``None`` if it never closes."""
    depth = 1
    for pos in range(start, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            depth -= 1
            if depth == 0:
                return text[start:pos].strip()
    return None  # unbalanced: the response was cut off inside the box


def extract_math_answer(text: str, question: str = "") -> str | None:
    """The final answer a response commits to, normalised, or ``None`` if it commits to none.

    Read in this order, the first that applies deciding (docs/openai.md, Reading answers):

    1. the last closed ``\\boxed{}``;
    2. after the last ``####``, else the last "final answer", else the last "answer is" /
       "answer:" / "answer =" / "solution is" / "solution:" (:data:`_MARKERS`): a value
       that opens the rest of that line (or, when the line ends there, the next line),
       read by :func:`_value_of`; when none is there the reply gives no answer;
    3. a reply that is one value and nothing else (``42``, ``x = 5``, ``$\\frac{3}{4}$``).

    A reply that states two different answers commits to neither: the value read must
    equal every value the reply states elsewhere (:func:`_stated_values`: every closed box,
    the value after every marker of any kind, and after an answer stated in another tense,
    ``the answer was 12``), or the reply gives none, even when it says it corrected itself.

    Nothing else is read: a number inside reasoning, a restated question, a reply cut off
    mid-sentence, quoting marks after a marker. ``Confidence: 80`` statements, echoed
    placeholders (``<final answer>``), fenced code and the prompt's own headers
    (``(answer: 12, confidence 0.50)``) never count. ``question`` is kept for the readers'
    shared signature: with markers only, a restated question gives no answer anyway.
    """
    del question
    if not text or not text.strip():
        return None
    text = _PLACEHOLDER.sub(" ", drop_confidence(_CODE_BLOCK.sub(" ", text)))
    answer = _committed_value(text)
    if answer is None or any(not math_equal(v, answer) for v in _stated_values(text)):
        return None
    return answer


def _committed_value(text: str) -> str | None:
    """The value the first rule of :func:`extract_math_answer` that applies gives."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return normalize_answer(boxed)
    for marker in _MARKERS:
        found = _own(text, marker)
        if found:
            return _value_after(text[found[-1].end() :])
    lines = [line for line in text.splitlines() if line.strip() and not _QUOTES.fullmatch(line)]
    return _value_of(lines[0]) if len(lines) == 1 else None


def _stated_values(text: str) -> list[str]:
    """Every answer value a reply states: the content of each closed box and the value
    after each marker (:data:`_MARKERS`, every kind and every occurrence, and
    :data:`_OTHER_TENSES`); markers followed by no value state none. Linear in the text:
    a value is read from the :data:`_STATED_CHARS` after its marker."""
    after = (
        _value_after(text[m.end() : m.end() + _STATED_CHARS])
        for marker in (*_MARKERS, _OTHER_TENSES)
        for m in _own(text, marker)
    )
    before = (normalize_answer(m.group(1)) for m in _NAMED_AFTER.finditer(text))
    return [normalize_answer(b) for b in _closed_boxes(text)] + [v for v in after if v] + [*before]


def _own(text: str, marker: re.Pattern[str]) -> list[re.Match[str]]:
    """The occurrences of ``marker`` that state the reply's own answer: not one it reports
    (``you explain that the answer is …``, :data:`_REPORTED`)."""
    return [
        m
        for m in marker.finditer(text)
        if not _REPORTED.search(text[max(0, m.start() - _REPORTED_CHARS) : m.start()])
    ]


_REPORTED = re.compile(
    r"(?i)\b(?:explain|say|said|think|thought|claim|claimed|believe|argue|argued|suggest"
    r"|suggested|insist|insisted|verify|verified|check|checked)(?:s|ed)?\s+that\s+"
    r"(?:the|their|his|her|your|our|its|my)?\s*(?:final\s+|correct\s+)?$"
)
"""What, right before a marker, makes its answer reported speech (``you explain that the
answer is 1220``, ``verify that your answer is …``): someone's answer, not the reply's."""
_REPORTED_CHARS = 60

_NAMED_AFTER = re.compile(
    rf"(?i)(?<![\w.])((?:{_NUMBER})(?:\s*/\s*\d+)?)\s*,?\s+(?:which\s+)?is\s+"
    r"(?:indeed\s+|also\s+|actually\s+|really\s+)?(?:the|our|my)\s+"
    r"(?:correct\s+|final\s+|right\s+|true\s+)?answer\b"
)
"""A value named as the answer after it is given (``you get 1, which is indeed the
answer``, ``12 is the correct answer``): never read as the answer (a number in reasoning
comes first), but a value that differs from the one read contradicts it."""


_STATED_CHARS = 400
"""How much of the text after a marker :func:`_stated_values` reads (a value opens the
marker's line or the next one; a longer clause only gives a value more readily)."""


def _closed_boxes(text: str) -> list[str]:
    """The content of every closed ``\\boxed{}``, in one pass over the braces."""
    opens = {m.end() for m in _BOX.finditer(text)}
    stack: list[int] = []
    boxes = []
    for pos, char in enumerate(text):
        if char == "{":
            stack.append(pos + 1)
        elif char == "}" and stack:
            start = stack.pop()
            if start in opens:
                boxes.append(text[start:pos].strip())
    return boxes


_MARKERS = tuple(
    re.compile(pattern)
    for pattern in (
        r"####",
        r"(?i)\bfinal\s+answer(?:\s+(?:of|for)\s[^.:=\n]{0,40}?\s+is\b|\s*(?:is|:|=))?\s*:?",
        r"(?i)(?<!\()(?<!;\s)(?<!let\s)(?<!var\s)(?<!const\s)"
        r"\b(?:answer(?:\s+to\s+(?:this|the)\s+(?:problem|question|round))?|solution)"
        r"\s*(?:is|:|=|(?:must|should|would)\s+be)\s*:?",
    )
)
"""The answer markers, strongest first. The last marker of the strongest kind present
decides; when no value follows it the reply gives none (a weaker marker is not consulted).
``answer:`` right after ``(`` or ``;`` is a prompt header a model echoes (``(solver;
answer: 32)``); ``let answer =`` is code."""

_OTHER_TENSES = re.compile(
    r"(?i)(?<!\()(?<!;\s)\b(?:answer|solution)\s+"
    r"(?:was|will\s+be|(?:would|should|must|could)\s+have\s+been)\s*:?"
)
"""An answer stated in another tense (``the answer was 12``, ``a correct answer would have
been 100``): never read as the answer, but a value it gives that differs from the one read
contradicts it."""

_CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_QUOTES = re.compile(r"\s*[<>`]{2,}\s*")
"""A line of quoting marks only (``<<<``, ``>>>``): how prompts quote replies, echoed."""

_NOT_UNITS = re.compile(r"(?i)(?:of|times|more|less|fewer|than|plus|minus|x)\b")
"""What, right after a number, makes it part of a phrase rather than the answer
(``0.5% of the class's profit``, ``50 x``, ``3 times as many``)."""
_ARITHMETIC = re.compile(r"[\d\s.,+\-*/×^()$%]+")
_CLAUSE_END = re.compile(r"[.;:!?](?:\s|$)|,\s|\s(?:because|since)\b")
_ANOTHER_VALUE = re.compile(r"(?:,|;|\s+(?:and|or))\s+\$?-?\.?\d")
"""A clause cut before another number (``2.5, 4``, ``12 or 13``): a list of values."""


def _value_after(tail: str) -> str | None:
    """The value after an answer marker: on its line, or alone on the next line."""
    line, _, rest = tail.partition("\n")
    if not re.sub(r"[\s*_`]", "", line):
        following = [piece for piece in rest.splitlines() if piece.strip()]
        line = following[0] if following else ""
        if _LIST_ITEM.match(line):
            return None  # "Your answer:" then "1. 91 shells + 40 = 131": a list, not 1
    elif _LIST_ITEM.match(line) and re.search(r"(?m)^\s*[*_]*\(?2[.)]\s+\S", rest):
        return None  # "answer: 1. 91 shells …" then "2. 190 shells …"
    return _value_of(line)


_LIST_ITEM = re.compile(r"\s*[*_]*\(?\d{1,2}[.)]\s+\S")
"""A numbered list's item (``1. 91 shells …``, ``2) …``): its number counts the items; a
marker's line that opens one reads as no value when the marker ends its line or the list
goes on (``2. …``)."""


def _value_of(line: str) -> str | None:
    """The value a line opens with, normalised, or ``None``.

    The line is cut at the end of its first clause (``. `` ``; `` ``: `` ``, ``) or before
    a justification (``because``, ``since``). A clause that is a calculation
    (``30 + $2 = 32``) gives its result, after the last ``=``. The value is a number, or an
    expression :func:`eval_expr` can read; a number may be followed by words (a unit:
    ``pounds per duck``) and asides in parentheses, but by no other number and by nothing
    that continues the phrase (:data:`_NOT_UNITS`: ``0.5% of the profit``, ``50 x``)."""
    line = re.sub(r"^[\s*_:`\"']+", "", line)
    clause = _CLAUSE_END.split(line)[0]
    if _ANOTHER_VALUE.match(line[len(clause) :]):
        return None  # "The answer is 2.5, 4.": two values, neither committed to
    clause = clause.strip().rstrip("*_`").strip()
    if "=" in clause and _ARITHMETIC.fullmatch(clause.split("=", 1)[0]):
        clause = clause.rsplit("=", 1)[1].strip()
    m = _NUMBER_THEN_WORDS.fullmatch(clause)
    if m:
        after = re.sub(r"\([^()]*\)", " ", m.group(2)).strip()
        if not after:
            return normalize_answer(m.group(1))
        if re.search(r"\d", after) or re.match(r"[a-zA-Z]", after) and _NOT_UNITS.match(after):
            return None
        if re.match(r"[a-zA-Z]", after):
            return normalize_answer(m.group(1))
    whole = normalize_answer(clause)
    return whole if _is_value(whole) else None


_NUMBER_THEN_WORDS = re.compile(rf"\$?\s*((?:{_NUMBER})(?:\s*/\s*\d+)?\s*%?)\$?((?:\s|\().*)")
"""A number, then the rest of its clause (``35 pounds per duck``, ``70 (9 days old)``)."""


def _is_value(text: str) -> bool:
    return bool(text) and (parse_number(text) is not None or _looks_symbolic(text))


_PLACEHOLDER = re.compile(r"<[^<>\n]{1,40}>")
"""``<final answer>``, ``<0-100>``: the answer format's placeholders, which a model echoes."""

_CONFIDENCE_STATEMENT = re.compile(
    r"(?i)\**\bconfidence(?:\s+level)?\**\s*(?:is|:|=)?\s*\**\s*\d+(?:\.\d+)?\s*%?"
)


def drop_confidence(text: str) -> str:
    """``text`` without its ``Confidence: 80`` statements (the reply format's last line)."""
    return _CONFIDENCE_STATEMENT.sub(" ", text)


def normalize_answer(text: str) -> str:
    """Strip what does not change the value: ``$``, ``\\text{}``, thousands commas, units, a
    trailing period, ``\\left``/``\\right``, spaces."""
    s = text.strip()
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\[()\[\]]", "", s)  # \( \) \[ \] math delimiters
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "%").replace("\\!", "")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\,", "").replace("\\;", "")
    s = s.replace("dfrac", "frac").replace("tfrac", "frac")
    s = s.strip().rstrip(".").strip()
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s)  # "x = 5" -> "5"
    # Thousands separators only between digit groups of three ("1,234,567", not "1,2").
    s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)
    # A number followed by unit words ("12 apples", "5 cm", "30 percent"): keep the number.
    m = re.fullmatch(rf"({_NUMBER}(?:\s*/\s*\d+)?)\s*(%|percent)?\s*[a-zA-Z][a-zA-Z .]*", s)
    if m:
        s = m.group(1) + ("%" if m.group(2) else "")
    s = s.replace("percent", "%")
    return re.sub(r"\s+", "", s) if parse_number(re.sub(r"\s+", "", s)) is not None else s


def parse_number(text: str) -> Fraction | None:
    """Exact value of ``12``, ``-3.5``, ``1,234``, ``3/4``, ``\\frac{3}{4}``, ``-\\frac34``,
    ``25%`` (as 25), or ``None``."""
    s = text.strip().replace(" ", "").replace("$", "").rstrip(".")
    if len(s) > MAX_NUMBER_CHARS:
        return None  # int() refuses over 4,300 digits; no answer is that long
    s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)
    s = s.rstrip("%")
    sign = 1
    if s.startswith("-"):
        sign, s = -1, s[1:]
    m = re.fullmatch(r"\\[dt]?frac\{?(\d+)\}?\{?(\d+)\}?", s)
    if m:
        num, den = int(m.group(1)), int(m.group(2))
        return sign * Fraction(num, den) if den else None
    m = re.fullmatch(r"(\d+(?:\.\d+)?|\.\d+)(?:/(\d+(?:\.\d+)?))?", s)
    if not m:
        return None
    value = Fraction(m.group(1))
    if m.group(2) is not None:
        den = Fraction(m.group(2))
        if den == 0:
            return None
        value /= den
    return sign * value


def _candidates(text: str) -> list[Fraction]:
    """Values a string may mean: ``25%`` means 25 or 0.25; anything else, itself."""
    value = parse_number(text)
    if value is None:
        return []
    if text.strip().endswith("%"):
        return [value, value / 100]
    return [value]


def _close(a: Fraction, b: Fraction, rel_tol: float) -> bool:
    # Exact arithmetic: a float conversion overflows past 1e308 (an answer of 400 digits).
    return abs(a - b) <= Fraction(rel_tol) * max(1, abs(b))


def math_equal(pred: str | None, truth: str, rel_tol: float = REL_TOL) -> bool:
    """Whether a predicted final answer equals the ground truth (numeric or symbolic)."""
    if pred is None:
        return False
    p, t = normalize_answer(pred), normalize_answer(truth)
    if not p:
        return False
    if p == t:
        return True
    p_vals, t_vals = _candidates(p), _candidates(t)
    if p_vals and t_vals:
        return any(_close(a, b, rel_tol) for a in p_vals for b in t_vals)
    return _symbolic_equal(p, t, rel_tol)


_SAFE_EXPR = re.compile(r"[0-9a-zA-Z+\-*/().\s]*")
_SAFE_NAMES = {"sqrt", "pi", "E", "I", "i", "x", "y", "z", "n", "a", "b", "c", "k", "t"}
_SAFE_POWER = re.compile(r"\*\*\s*(?:\(?\s*-?\d{1,3}(?:\s*/\s*\d{1,3})?\s*\)?|[a-z])(?!\s*\*\*)")


def latex_to_expr(text: str) -> str | None:
    """A LaTeX-ish answer as a Python-syntax expression string, or ``None`` if it is not
    one :func:`eval_expr` may evaluate (only numbers, + - * / ^, parentheses, sqrt, pi, a
    few one-letter symbols, short exponents). This is a cheap first filter; the bound on
    what evaluation may compute is :func:`eval_expr`'s."""
    s = text
    for _ in range(5):  # innermost first: \frac{\sqrt{2}}{2}, \frac{\frac{..}{..}}{..}
        s = re.sub(r"\\sqrt\s*\{([^{}]*)\}", r"sqrt(\1)", s)
        s = re.sub(r"\\frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"((\1)/(\2))", s)
    s = re.sub(r"\\frac(\d)(\d)", r"(\1/\2)", s)
    s = re.sub(r"\\sqrt(\d+)", r"sqrt(\1)", s)
    s = s.replace("\\pi", "pi").replace("\\cdot", "*").replace("\\times", "*")
    s = s.replace("{", "(").replace("}", ")").replace("^", "**")
    if len(s) > 120 or "\\" in s or "__" in s or not _SAFE_EXPR.fullmatch(s):
        return None
    if any(name not in _SAFE_NAMES for name in re.findall(r"[a-zA-Z]+", s)):
        return None
    if s.count("**") != len(_SAFE_POWER.findall(s)):
        return None
    if any(len(digits) > 30 for digits in re.findall(r"\d+", s)):
        return None
    return s


def _looks_symbolic(text: str) -> bool:
    return latex_to_expr(text) is not None and bool(re.search(r"\d|pi|sqrt", text))


# --------------------------------------------------------------------- bounded evaluation

MAX_LOG10 = 10_000
"""Largest |log10 |v|| of any value met while evaluating an answer (a number of up to
10,000 digits, or as small). Past it the answer is not comparable, hence wrong: a tower
such as ``10^{10^{10^{10}}}`` has more digits than any computer can hold."""
EVAL_DIGITS = 40
"""Working precision (significant digits) of the evaluation."""
_POINTS = 3
"""Points at which expressions with symbols are compared."""

_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*|\.\d+)|([a-zA-Z]+)|(\*\*|[-+*/()]))")


class _NotComparable(Exception):
    """The expression is malformed, divides by zero, or leaves the ``MAX_LOG10`` range."""


def _explicit(src: str) -> str:
    """``src`` with implicit multiplication written out (``2sqrt(2)``, ``2pi``, ``(1)(2)``,
    ``3x``): a ``*`` between an operand's end and the start of the next operand."""
    out: list[str] = []
    pos, prev_ends_operand = 0, False
    while pos < len(src.rstrip()):
        m = _TOKEN.match(src, pos)
        if m is None:
            raise _NotComparable(f"unexpected character at {pos}")
        number, name, op = m.groups()
        starts_operand = bool(number or name or op == "(")
        if prev_ends_operand and starts_operand:
            out.append("*")
        out.append(number or name or op)
        prev_ends_operand = bool(number or (name and name != "sqrt") or op == ")")
        pos = m.end()
    return " ".join(out)


def _check(value: mpmath.mpc) -> mpmath.mpc:
    if not mpmath.isfinite(value):
        raise _NotComparable("not finite")
    if value != 0 and abs(mpmath.log10(abs(value))) > MAX_LOG10:
        raise _NotComparable("magnitude out of range")
    return value


def _power(base: mpmath.mpc, exp: mpmath.mpc) -> mpmath.mpc:
    if base == 0:
        if exp.real <= 0:
            raise _NotComparable("zero to a non-positive power")
        return mpmath.mpc(0)
    # The result's size, known before computing it: log10 |b^e| = Re(e log b) / ln 10.
    if abs((exp * mpmath.log(base)).real) / mpmath.ln(10) > MAX_LOG10:
        raise _NotComparable("power out of range")
    return _check(mpmath.power(base, exp))


def _divide(a: mpmath.mpc, b: mpmath.mpc) -> mpmath.mpc:
    if b == 0:
        raise _NotComparable("division by zero")
    return a / b


_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: _divide,
    ast.Pow: _power,
}


def _eval_node(node: ast.AST, env: dict[str, mpmath.mpc]) -> mpmath.mpc:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return _check(mpmath.mpc(mpmath.mpf(repr(node.value))))
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval_node(node.operand, env)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        a, b = _eval_node(node.left, env), _eval_node(node.right, env)
        return _check(_BINARY[type(node.op)](a, b))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "sqrt"
        and len(node.args) == 1
        and not node.keywords
    ):
        return _check(mpmath.sqrt(_eval_node(node.args[0], env)))
    raise _NotComparable(f"{type(node).__name__} is not arithmetic")


def eval_expr(src: str, symbols: dict[str, float] | None = None) -> mpmath.mpc | None:
    """The value of an expression from :func:`latex_to_expr`, or ``None`` if it cannot be
    computed within bounds.

    Bounded in time and memory by construction: the string is at most 120 characters
    (or one fraction, from :func:`parse_number`), so the tree has at most that many
    nodes; each node is one operation on
    ``EVAL_DIGITS``-digit floats; and a power is computed only after its result is known
    to stay within ``10^±MAX_LOG10``. Nothing is ever evaluated exactly, so ``9^9^9^9``
    is refused in microseconds instead of filling the memory. ``symbols`` gives the values
    of one-letter symbols; ``pi``, ``E`` and ``I`` are the constants.
    """
    try:
        tree = ast.parse(_explicit(src), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError, _NotComparable):
        return None
    with mpmath.workdps(EVAL_DIGITS):
        env = {"pi": mpmath.mpc(mpmath.pi), "E": mpmath.mpc(mpmath.e), "I": mpmath.mpc(0, 1)}
        env.update({k: mpmath.mpc(v) for k, v in (symbols or {}).items()})
        try:
            return _eval_node(tree.body, env)
        except (_NotComparable, ZeroDivisionError, OverflowError, ValueError, RecursionError):
            return None


def _sample_points(names: set[str]) -> list[dict[str, float]]:
    """Values for the symbols at which two expressions are compared: distinct, irrational,
    of moderate size (in (1, 3)), different per symbol and per point."""
    ordered = sorted(names)
    return [
        {
            n: 1.1 + ((0.6180339887 * (p + 1) + 0.4142135623 * j) % 1.0) * 1.8
            for j, n in enumerate(ordered)
        }
        for p in range(_POINTS)
    ]


def _as_expr(text: str) -> str | None:
    """An expression for :func:`eval_expr`: a plain number as its exact fraction (any
    length up to ``MAX_NUMBER_CHARS``), anything else through :func:`latex_to_expr`."""
    value = parse_number(text)
    if value is not None and not text.strip().endswith("%"):
        return f"({value.numerator})/({value.denominator})"
    return latex_to_expr(text)


def _symbolic_equal(pred: str, truth: str, rel_tol: float) -> bool:
    """Whether two expressions agree numerically (at several points if they have symbols)."""
    a_src, b_src = _as_expr(pred), _as_expr(truth)
    if a_src is None or b_src is None:
        return False
    names = set(re.findall(r"[a-zA-Z]+", a_src + " " + b_src)) - {"sqrt", "pi", "E", "I"}
    for point in _sample_points(names) if names else [{}]:
        a, b = eval_expr(a_src, point), eval_expr(b_src, point)
        if a is None or b is None:
            return False  # malformed, or out of range: it cannot equal the truth
        with mpmath.workdps(EVAL_DIGITS):
            if abs(a - b) > rel_tol * max(1, abs(b)):
                return False
    return True


# ----------------------------------------------------------------------------- multiple choice

_ANSWER_PHRASE = (
    r"(?:answer(?:\s+to\s+(?:this|the)\s+(?:problem|question))?"
    r"|correct\s+(?:option|choice|letter)|(?:i|we)\s+(?:choose|pick|select))"
    r"\s*(?:is|:|=|would\s+be|should\s+be)?\s*:?\s*(?:option\s+|choice\s+)?"
)


_INSTRUCTION = re.compile(
    r"(?i)answer\s+with\s+the\s+letter\s+of\s+the\s+correct\s+option\s*\([^()\n]*\)\.?"
)
"""The question's own instruction (:func:`core.tasks.mcq.format_mcq`), which a model echoes:
it names a range of letters, never a choice."""


def _letter_token(letters: str) -> str:
    """A letter standing alone: ``B``, ``(B)``, ``**B**``, ``B)``; lower case only at an end
    of sentence so that the article "a" never counts; never the start of a range
    (``(A-D)``)."""
    up, low = letters.upper(), letters.lower()
    return (
        rf"(?:\*\*|\\boxed\{{|\(|\[)?\s*"
        rf"(?:([{up}])(?![A-Za-z0-9])(?!\s*-\s*[A-Z]\b)|([{low}])(?=\s*(?:$|[.,;:!?)\]*}}])))"
    )


def extract_choice(
    text: str, n_options: int = 4, choices: tuple[str, ...] | list[str] = ()
) -> str | None:
    """The one option letter (``A``..) a response chooses, or ``None`` if none or ambiguous.

    Read in this order:

    1. an answer phrase with a letter ("the answer is (C)", "Answer: b", "The answer to
       this problem is D."); phrases naming two different letters give no answer;
    2. lines of the option list's shape (``A) 13``, ``B. 14``, ``*C) Cy``): two or more
       are a list, echoed or made up, not a choice, and are dropped; a single one that is
       the reply's first or last line is the choice;
    3. a reply that is one letter or marks exactly one (``**C**``, ``\\boxed{C}``, ``(C)``);
    4. when the option texts ``choices`` are given, an option named by its text: after an
       answer phrase ("The correct answer is 13.") or as the start of the whole reply or of
       its last line ("Boron").

    With ``choices``, a letter followed by another option's text (``A) 3`` when ``3`` is
    option C) contradicts itself: no answer.
    """
    if not text or not text.strip() or not 2 <= n_options <= 26:
        return None
    text = _INSTRUCTION.sub(" ", drop_confidence(text))
    letters = "".join(chr(ord("A") + i) for i in range(n_options))
    token = _letter_token(letters)
    span = letters[0] + "-" + letters[-1]
    either = rf"(?:\s*(?:or|and|/|,)\s*\(?[{span}{span.lower()}]\b)"

    phrase = list(re.finditer(rf"(?i:{_ANSWER_PHRASE}){token}(?P<more>{either})?", text))
    if phrase:
        last = max(phrase, key=lambda m: m.start())
        if last.group("more"):
            return None  # "the answer is A or B"
        if len({(m.group(1) or m.group(2)).upper() for m in phrase}) > 1:
            return None  # "Your answer is C. …" then "Your answer is D. …": two answers
        letter = (last.group(1) or last.group(2)).upper()
        return _consistent(letter, text[last.end() :], letters, choices)

    listed = list(_option_line(letters).finditer(text))
    if len(listed) >= 2 or any(_ANOTHER_OPTION.search(m.group(2)) for m in listed):
        for m in reversed(listed):
            text = text[: m.start()] + text[m.end() :]
    elif listed:
        m, lines = listed[0], [line for line in text.splitlines() if line.strip()]
        if m.group(0).strip() in (lines[0].strip(), lines[-1].strip()):
            return _consistent(m.group(1), m.group(2), letters, choices)
    stripped = text.strip()
    if not stripped:
        return None
    bare = re.fullmatch(rf"\(?\**([{letters}{letters.lower()}])\**\)?[.):]?", stripped)
    if bare:
        return bare.group(1).upper()

    marked = set(re.findall(rf"\\boxed\{{\s*([{letters}])\s*\}}", stripped))
    marked |= set(re.findall(rf"\*\*\(?([{letters}])\)?\*\*", stripped))
    if not marked:
        marked = set(re.findall(rf"\(([{letters}])\)", stripped))
    if len(marked) == 1:
        return marked.pop()
    if len(choices) == n_options:
        return _choice_by_text(stripped, choices)
    return None


def _consistent(
    letter: str, after: str, letters: str, choices: tuple[str, ...] | list[str]
) -> str | None:
    """``letter``, unless the text right after it contradicts it: another option's text
    (``A) 3`` when 3 is option C's), a number that is no option's text (``D) 10``), or
    another option named (``D, which corresponds to option B``)."""
    if len(choices) != len(letters):
        return letter
    head = re.sub(r"^[\s*_)\].:,]+", "", after).split("\n", 1)[0]
    key = _option_key(head)
    named = _options_named(key, [_option_key(c) for c in choices])
    if named:
        return letter if letters.index(letter) in named else None
    others = {x.upper() for x in re.findall(r"(?i)\boption\s+([a-z])\b", head)} - {letter}
    return None if others or re.match(r"[-+]?\$?\d", key) else letter


def _options_named(head: str, keys: list[str]) -> list[int]:
    """The options whose text ``head`` is or starts with (then a non-word character)."""
    return [
        i
        for i, key in enumerate(keys)
        if key and (head == key or re.match(rf"{re.escape(key)}(?!\w|\.\w)", head))
    ]


def _option_line(letters: str) -> re.Pattern[str]:
    return re.compile(rf"^[ \t*#>-]*\(?\**([{letters}])\**[.):,]\s*(.+?)\s*$", re.MULTILINE)


_ANOTHER_OPTION = re.compile(r"(?:^|[\s,;])\(?[A-Z]\)\s*\S")
"""An option line whose text holds another option (``D) 12, E) 24``) is a list."""


def _option_key(text: str) -> str:
    """An option text compared loosely: case, markdown, ``$``, spacing, end punctuation."""
    s = re.sub(r"[*_`$]", "", text.lower())
    return re.sub(r"\s+", " ", s).strip().rstrip(".!;:,").strip()


_TEXT_PHRASE = re.compile(
    r"(?i)\b(?:answer|correct\s+(?:option|choice))\s*(?:is|:|=|would\s+be|should\s+be)\s*:?\s*"
)


def _choice_by_text(text: str, choices: tuple[str, ...] | list[str]) -> str | None:
    """The option whose text follows the last answer phrase, or begins the whole reply or
    its last line; the longest option text wins when one is the start of another, and
    "X or Y" names none."""
    keys = [_option_key(c) for c in choices]
    tails = [text[m.end() :] for m in _TEXT_PHRASE.finditer(text)][-1:]
    lines = [line for line in text.splitlines() if line.strip()]
    tails += [text] + ([lines[-1]] if lines else [])
    for tail in tails:
        head = _option_key(tail.strip().splitlines()[0]) if tail.strip() else ""
        named = _options_named(head, keys)
        if named:
            best = max(named, key=lambda i: len(keys[i]))
            rest = head[len(keys[best]) :]
            others = "|".join(re.escape(k) for k in keys if k and k != keys[best])
            if others and re.match(rf"\s*(?:or|and|/|,)\s*(?:{others})(?![\w.])", rest):
                return None  # "Boron or carbon" names two
            return chr(ord("A") + best)
    return None


# ----------------------------------------------------------------------------- dispatch


def read_answer(task: Task, text: str) -> str | None:
    """The answer a reply gives to a maths or multiple-choice task (the one reading every
    back-end and the checker share): a normalised maths answer, an option letter, or
    ``None`` when the reply commits to none (docs/openai.md, Reading answers)."""
    if task.domain == "math":
        return extract_math_answer(text, task.question)
    if task.domain == "mcq":
        return extract_choice(text, len(task.choices) or 4, task.choices)
    raise ValueError(f"read_answer reads maths and multiple choice, not {task.domain!r}")


def check(task: Task, response_text: str, sandbox: str = "auto") -> float:
    """Score in [0, 1] of a response for a task: 1.0 right, 0.0 wrong (code: tests passed,
    the candidate run in ``sandbox``: ``auto``/``bwrap`` or ``process``)."""
    if task.domain == "math":
        return 1.0 if math_equal(read_answer(task, response_text), task.answer) else 0.0
    if task.domain == "mcq":
        return 1.0 if read_answer(task, response_text) == task.answer.strip().upper() else 0.0
    if task.domain == "code":
        # The checker starts subprocesses; only code tasks need it.
        from core.sandbox import SandboxConfig
        from core.tasks.code_checker import check_code

        return float(check_code(task, response_text, SandboxConfig(backend=sandbox)))
    raise ValueError(f"unknown task domain {task.domain!r} for task {task.task_id}")
