"""This machine's processes and ports, as every layer asks about them: is process ``pid``
still the one we started (:func:`process_alive`), and is a port on 127.0.0.1 free
(:func:`check_port_free`). Standard library only, so that the lab's pages and the CLI's
start-up checks can ask without loading anything heavy.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from core.errors import UserError

HOST = "127.0.0.1"
"""The one address our servers (the lab, the local model server) listen on."""


def proc_start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat`` (start time in clock ticks); None off Linux or if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    # fields[0] is the state (field 3); a zombie has exited already.
    return None if fields[0] in "ZX" else fields[19]


def process_alive(pid: int, start: str | None = None) -> bool:
    """Whether process ``pid`` runs (not a zombie) and, given its :func:`proc_start_time`
    ``start``, is still that process, not a later one that reuses its pid."""
    if Path("/proc").is_dir():
        now = proc_start_time(pid)
        return now is not None and (start is None or now == start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_port_free(port: int, remedy: str) -> None:
    """UserError (``...; remedy``) if another program already listens on 127.0.0.1:``port``."""
    with socket.socket() as s:
        # As the servers will: a port left in TIME_WAIT by a stopped server is free to reuse.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError as err:
            raise UserError(f"port {port} on {HOST} is in use ({err.strerror}); {remedy}") from err
