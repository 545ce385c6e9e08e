"""Every chart's data downloads as CSV: the numbers drawn, one row per point."""

from __future__ import annotations

import json

import pandas as pd

from lab import figures as F
from tests.lab.test_pages import _open


def test_figure_table_holds_every_drawn_point_with_its_interval():
    agg = pd.DataFrame(
        {"run_id": ["a", "b"], "policy": ["qmix", "star"], "policy_id": ["qmix", "star"],
         "label": ["qmix · a", "star · b"], "episodes": [10, 10], "accuracy": [0.9, 0.6],
         "mean_tokens": [100.0, 50.0], "accuracy_lo": [0.6, 0.3], "accuracy_hi": [0.98, 0.85],
         "tokens_lo": [90.0, 45.0], "tokens_hi": [110.0, 55.0]}
    )  # fmt: skip
    table = F.figure_table(F.pareto_figure(agg))
    points = table[table["trace"].isin(["qmix", "star"])].set_index("label")
    assert points.loc["qmix · a", "x"] == 100.0 and points.loc["qmix · a", "y"] == 0.9
    assert points.loc["star · b", "y_minus"] == 0.6 - 0.3
    assert set(table["trace"]) == {"qmix", "star", "Pareto front"}
    heat = F.figure_table(F.weights_figure([[0.1, 0.2], [0.3, 0.4]], ["a", "b"]))
    assert len(heat) == 4 and heat["z"].tolist() == [0.1, 0.2, 0.3, 0.4]


def test_every_chart_on_a_page_has_its_csv(lab_env):
    for page in ("views/compare.py", "views/replay.py"):
        at = _open(page)
        charts = {c.key for c in at.get("plotly_chart")}
        buttons = {b.key for b in at.get("download_button")}
        assert charts and {f"{k}_csv" for k in charts} <= buttons, page


def test_the_sidebar_picks_what_every_charts_camera_saves(lab_env):
    """PNG by default; SVG once picked (the sidebar's ``chart_format``; AppTest does not
    see sidebar widgets written before ``st.navigation`` runs the page, so it is set through
    the session state the widget writes), on every chart of every page visited after."""
    at = _open("views/compare.py")

    def formats() -> set[str]:
        return {
            json.loads(c.proto.config)["toImageButtonOptions"]["format"]
            for c in at.get("plotly_chart")
        }

    assert formats() == {"png"}
    at.session_state["chart_format"] = "SVG"
    at.run()
    assert formats() == {"svg"}
    at.switch_page("views/replay.py").run()
    assert not at.exception and at.get("plotly_chart") and formats() == {"svg"}
