"""Compare shows a calibration's "simulated vs real" tables (lab/calibration.py)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from core.store.writer import RunLogger
from lab import calibration
from tests.lab.conftest import ROOT


def _row(group: str, real: float, sim: float) -> dict:
    return {
        "group": group, "n": 12, "tasks": 4,
        "real_acc": [real, real - 0.1, real + 0.1], "sim_acc": [sim, sim - 0.05, sim + 0.05],
        "err_acc": [sim - real, sim - real - 0.1, sim - real + 0.1],
        "stock_err_acc": [0.7, 0.6, 0.8],
        "real_tok": [1500.0, 1400.0, 1600.0], "sim_tok": [1450.0, 1420.0, 1480.0],
        "err_tok": [-50.0, -150.0, 60.0], "stock_err_tok": [9000.0, 8800.0, 9200.0],
    }  # fmt: skip


REPORT = {
    "split": {"check_fraction": 0.3, "fit_episodes": 40, "fit_tasks": 9, "check_episodes": 12,
              "check_tasks": 4, "draws": 20},
    "base": "flash-lite",
    "fit": {"params": [], "stock": {"difficulty_jitter": "not observed"}, "counts": {}},
    "check": {"by_topology": [_row("star", 0.25, 0.31)], "by_action": [_row("debate_check", 0.1, 0.12)]},
}  # fmt: skip


def test_compare_shows_simulated_vs_real(own_db) -> None:
    with RunLogger(own_db, "calibrate", {"calibration": REPORT}, model="calibrated-smollm2") as log:
        run_id = log.run_id
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.switch_page("views/compare.py")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert "Simulated vs real" in [h.value for h in at.subheader]
    picker = next(s for s in at.selectbox if s.key == "compare_calibration")
    assert picker.value == run_id
    tables = [f.value for f in at.dataframe if "real accuracy" in f.value.columns]
    assert tables[0]["policy"].tolist() == ["star"]
    assert tables[0]["real accuracy"].tolist() == ["0.25 (0.15, 0.35)"]
    assert tables[1]["action"].tolist() == ["debate_check"]
    assert any("other** tasks" in c.value for c in at.caption)


def test_check_frame_formats_intervals() -> None:
    frame = calibration.check_frame(REPORT, "by_topology")
    assert frame.loc[0, "error"] == "+0.06 (-0.04, +0.16)"
    assert frame.loc[0, "base preset's token error"] == "+9000"
    assert calibration.check_frame({}, "by_action").empty
