"""lab/data.py's process-wide pieces that outlive a page run."""

from __future__ import annotations

import subprocess
import sys

from tests.lab.conftest import ROOT

EXIT_AT_ONCE = """
import atexit, sys
import lab.data as data

thread = data.warm_rollout()
atexit.register(lambda: print("alive at exit:", thread.is_alive(),
                              "imported:", "core.experiment.evaluate" in sys.modules))
"""


def test_a_process_that_ends_during_the_warm_up_waits_for_it() -> None:
    """The Failure lab's warm-up imports PyTorch in a thread; a process ending at once (a
    stopped server, an AppTest script) must let it finish, not kill it mid-import (as a
    daemon it died at shutdown with a fatal error and a nonzero exit code)."""
    done = subprocess.run(
        [sys.executable, "-c", EXIT_AT_ONCE], cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Fatal Python error" not in done.stderr
    assert "alive at exit: False imported: True" in done.stdout, done.stdout
