"""core.host: the one answer to "does this process still run" and "is this port free"."""

import os
import socket
import subprocess
import sys

import pytest

from core.errors import UserError
from core.host import check_port_free, proc_start_time, process_alive


def test_process_alive_knows_a_live_a_reaped_and_a_reused_pid() -> None:
    assert process_alive(os.getpid(), proc_start_time(os.getpid()))
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid names no process now
    assert not process_alive(child.pid)
    if proc_start_time(os.getpid()) is not None:  # Linux: a pid reused by a later process
        assert not process_alive(os.getpid(), "0")


def test_a_taken_port_is_one_sentence_with_the_callers_remedy() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(UserError, match=f"^port {port} on 127.0.0.1 is in use .*; pass "):
            check_port_free(port, "pass another --port.")
