"""The lab on a store its user can read but not write (issue 19 item 10): opened read-only.

An analyst opens a colleague's store (file ``0o444`` in a ``0o555`` folder). The pages run
under streamlit.testing's AppTest in a process of a user the modes bind
(:mod:`tests.unprivileged`): no page raises, Replay and Compare draw their charts, every
page that writes says it cannot and offers no button that would, and the store's folder is
left exactly as it was (no ``<db>.lab`` folder, no spool, the file unchanged).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from tests.lab.conftest import ROOT, seed_store
from tests.unprivileged import remove_tree, shared_tree, unprivileged_prefix

WHO = unprivileged_prefix()

PAGES = (None, "views/replay.py", "views/compare.py", "views/train.py",
         "views/failure_lab.py", "views/runs.py")  # fmt: skip

SCRIPT = """
import json, sys
from streamlit.testing.v1 import AppTest

out = {}
for page in json.loads(sys.argv[2]):
    at = AppTest.from_file(sys.argv[1], default_timeout=120)
    if page:
        at.switch_page(page)
    at.run()
    if page == "views/runs.py":  # confirm a deletion: the button must stay off
        run = at.selectbox(key="runs_pick").value
        at.text_input(key=f"runs_confirm_{run}").set_value(run).run()
    out[page or "home"] = {
        "exceptions": [e.message for e in at.exception],
        "read_only_notes": [i.value for i in at.info if "read-only" in i.value],
        "buttons": {b.key: b.disabled for b in at.button},
        "charts": [c.key for c in at.get("plotly_chart")],
        "sidebar": [c.value for c in at.sidebar.caption],
    }
print(json.dumps(out))
"""


def _tree(folder) -> dict[str, str]:
    return {
        p.name: f"{p.lstat().st_mode:o} "
        + (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "")
        for p in folder.iterdir()
    }


@pytest.mark.skipif(
    WHO is None, reason="running as root without setpriv: no way to drop the right to write"
)
def test_pages_open_a_read_only_store_read_only() -> None:
    top = shared_tree()
    try:
        shared = top / "shared"
        shared.mkdir()
        db = shared / "store.duckdb"
        seed_store(db, episodes_per_run=3)
        db.chmod(0o444)
        (shared / "store.duckdb.spool").chmod(0o555)
        shared.chmod(0o555)
        before = _tree(shared)
        _, prefix, extra = WHO
        home = top / "home"
        home.mkdir(mode=0o777)
        home.chmod(0o777)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "PYTHONPATH": str(ROOT),
            "AGENTQMIX_DB": str(db),
            "AGENTQMIX_LAB_DEMO": "1",  # on: a read-only store must not start it anyway
        }
        pages = json.dumps(list(PAGES))
        done = subprocess.run(
            [*prefix, sys.executable, "-c", SCRIPT, str(ROOT / "app.py"), pages],
            cwd=home, env=env, capture_output=True, text=True, timeout=600, **extra,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        got = json.loads(done.stdout.strip().splitlines()[-1])
        assert _tree(shared) == before, "the lab wrote beside a read-only store"
    finally:
        remove_tree(top)
    for page, seen in got.items():
        assert seen["exceptions"] == [], (page, seen["exceptions"])
    assert any(c.endswith("(read-only)") for c in got["home"]["sidebar"]), got["home"]
    assert got["views/replay.py"]["charts"][:1] == ["replay_graph"]
    assert got["views/compare.py"]["charts"], "Compare drew nothing"
    for page in ("home", "views/train.py", "views/failure_lab.py", "views/runs.py"):
        assert got[page]["read_only_notes"], f"{page} does not say it cannot write"
    assert "home_real_demo" not in got["home"]["buttons"]
    assert got["views/train.py"]["buttons"] == {"FormSubmitter:train_form-Start training": True}
    assert got["views/train.py"]["charts"], "the training curves of logged runs still draw"
    assert got["views/failure_lab.py"]["buttons"]["fail_run_now"] is True
    assert got["views/runs.py"]["buttons"]["runs_delete"] is True
