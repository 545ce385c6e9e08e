"""Compare shows a transfer study's *Sim vs real* tables (lab/simreal.py)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from core.store.writer import RunLogger
from lab import simreal
from tests.lab.conftest import ROOT


def _ci(mean: float, half: float) -> dict:
    return {"mean": mean, "lo": mean - half, "hi": mean + half}


def _policy(name: str, family: str, reward: float) -> dict:
    return {
        "policy": name, "family": family, "reward": _ci(reward, 0.02), "correct": _ci(0.5, 0.2),
        "prompt": _ci(3000.0, 200.0), "completion": _ci(400.0, 30.0),
        "predicted_stock": _ci(0.8, 0.05), "predicted_calibrated": _ci(reward + 0.01, 0.03),
    }  # fmt: skip


RESULT = {
    "config": {"benchmark": "arith", "stream": 1000, "train_episodes": 2000, "base": "flash-lite"},
    "tasks": 20,
    "policies": [_policy("stock", "learned", 0.41), _policy("star", "fixed", 0.45)],
    "ranking": {"stock": {"tau": 0.2, "lo": -0.4, "hi": 0.7, "policies": 7},
                "calibrated": {"tau": 0.6, "lo": 0.1, "hi": 0.9, "policies": 7}},
    "differences": [{"a": "stock", "b": "star", "reward": _ci(-0.04, 0.05),
                     "correct": _ci(-0.05, 0.1), "prompt": _ci(-900.0, 300.0),
                     "completion": _ci(-40.0, 20.0),
                     "mcnemar": {"a_only": 2, "b_only": 3, "p": 1.0}}],
    "interval": "95 % percentile bootstrap over tasks, 2000 resamples",
}  # fmt: skip


def test_compare_shows_sim_vs_real(own_db) -> None:
    with RunLogger(own_db, "study", {"study": RESULT}, model="SmolLM2", benchmark="arith") as log:
        run_id = log.run_id
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.switch_page("views/compare.py")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert "Sim vs real" in [h.value for h in at.subheader]
    picker = next(s for s in at.selectbox if s.key == "compare_study")
    assert picker.value == run_id
    frames = {tuple(f.value.columns)[0]: f.value for f in at.dataframe}
    assert frames["simulator"]["Kendall tau"].tolist() == ["+0.20", "+0.60"]
    assert frames["a − b"]["McNemar (a only / b only, p)"].tolist() == ["2 / 3, p = 1.000"]
    policies = next(f.value for f in at.dataframe if "predicted (calibrated)" in f.value.columns)
    assert policies["policy"].tolist() == ["stock", "star"]
    assert any("20 held-out real tasks of arith" in c.value for c in at.caption)


def test_frames_format_intervals() -> None:
    frame = simreal.differences_frame(RESULT)
    assert frame.loc[0, "reward"] == "-0.040 [-0.090, +0.010]"
    assert simreal.policy_frame(RESULT).loc[1, "real reward"] == "0.450 [0.430, 0.470]"
    assert simreal.policy_frame({}).empty and simreal.ranking_frame({}).empty
