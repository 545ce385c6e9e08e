"""Run commands as a user the file modes apply to, for the permission tests (issue 19).

As root every file is writable (CAP_DAC_OVERRIDE), so a read-only store proves nothing,
and CI runs as root. :func:`unprivileged_prefix` gives what makes the modes bite:

* not root: nothing, the user already meets them;
* root, when uid 65534 (nobody) can run this interpreter and import the project: that
  user (the files under test are then made readable or writable by others as each case
  needs);
* root otherwise (the interpreter or the clone under ``/root``, which other users cannot
  enter: the usual container): root with every capability dropped (``setpriv``), which
  the kernel holds to a file's owner bits exactly as it holds nobody to the others' bits.

The tests give their files modes that deny both (``0o444`` files, ``0o555`` folders,
``0o000`` for unreadable), so each case means the same under every prefix.

Run as a module (``python -m tests.unprivileged CASES.json RESULTS.json``) this file is
the runner: it imports the CLI once and runs every case's ``agentqmix`` command through
:func:`core.cli.main` in turn, each with its own stdout and stderr (file descriptors 1 and
2, so nothing written around Python's streams is missed), recording the exit code, an
uncaught exception's traceback, and, for ``lab``, the command it would have become.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534


@functools.cache
def _nobody_can_run_us() -> bool:
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import core.cli"],
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            capture_output=True,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def unprivileged_prefix() -> tuple[str, list[str], dict[str, Any]] | None:
    """(who, argv prefix, extra ``subprocess.run`` keywords) that run a command as a user
    file modes bind, or None when this machine offers no way (root without ``setpriv``)."""
    if os.geteuid() != 0:
        return f"uid {os.geteuid()}", [], {}
    if _nobody_can_run_us():
        return "uid 65534", [], {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    if setpriv := shutil.which("setpriv"):
        return "root without capabilities", [setpriv, "--bounding-set=-all", "--inh-caps=-all"], {}
    return None


def shared_tree() -> Path:
    """A new folder every user can enter (pytest's ``tmp_path`` sits in a ``0o700`` one)."""
    top = Path(tempfile.mkdtemp(prefix="agentqmix-perms-"))
    top.chmod(0o755)
    return top


def remove_tree(top: Path) -> None:
    """Give the owner back every right under ``top`` (a non-root run needs them), then remove it."""
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(folder) / name
            if not path.is_symlink():
                path.chmod(0o755)
    shutil.rmtree(top)


def snapshot(top: Path, skip: str) -> dict[str, str]:
    """Mode and SHA-256 of everything under ``top`` except folder ``skip``: what a refused
    command must leave as it was."""
    out = {}
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if Path(folder, d) != top / skip]
        for name in dirs + files:
            path = Path(folder) / name
            st = path.lstat()
            try:
                digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
            except PermissionError:  # a file this user may not read: its size and time
                digest = "unread"
            out[str(path.relative_to(top))] = (
                f"{st.st_mode:o} {st.st_size} {st.st_mtime_ns} {digest}"
            )
    return out


def run_cases(
    cases: dict[str, list[str]], top: Path, skip: str, env: dict[str, str], timeout: float
) -> dict[str, dict[str, Any]]:
    """Run every case unprivileged in one process (:func:`main`); its results by name."""
    who = unprivileged_prefix()
    assert who is not None
    _, prefix, extra = who
    spec, results = top / skip / "cases.json", top / skip / "results.json"
    spec.write_text(json.dumps({"cases": cases, "top": str(top), "skip": skip}))
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "tests.unprivileged", str(spec), str(results)],
        cwd=top / skip,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        **extra,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(results.read_text())


class _Exec(BaseException):
    """``lab`` replacing itself with the launcher: stopped here (not a SystemExit, which
    :func:`core.cli.main` would take for an exit code)."""


def _run_one(argv: list[str], out_dir: Path) -> dict[str, Any]:
    from core.cli import main

    became: list[str] = []

    def execv(path: str, args: list[str]) -> None:
        became.extend(args)
        raise _Exec

    os.execv = execv
    saved = os.dup(1), os.dup(2)
    out, err = out_dir / "stdout", out_dir / "stderr"
    code: int | str
    with open(out, "wb") as o, open(err, "wb") as e:
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
        try:
            code = main(argv)
        except _Exec:
            code = "exec"
        except BaseException:  # what the user would see: a traceback
            traceback.print_exc()
            code = "raised"
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    for fd in saved:
        os.close(fd)
    return {
        "code": code,
        "stdout": out.read_text(errors="replace"),
        "stderr": err.read_text(errors="replace"),
        "became": became,
    }


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    top, skip = Path(spec["top"]), spec["skip"]
    scratch = Path(tempfile.mkdtemp(dir=top / skip))
    results = {}
    for name, case in spec["cases"].items():
        before = snapshot(top, skip)
        results[name] = _run_one(case, scratch)
        after = snapshot(top, skip)
        results[name]["changed"] = sorted(
            k for k in before.keys() | after.keys() if before.get(k) != after.get(k)
        )
    Path(argv[1]).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
