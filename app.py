"""Agent Q-Mix Lab: the Streamlit entry point, a thin router over the files in views/.

Run with ``agentqmix lab`` (which also starts the first-start demo with the server) or
``streamlit run app.py``; the database is ``$AGENTQMIX_DB`` (default ``./agentqmix.duckdb``).
Every page is listed here (``st.navigation``); each page's address (``/replay``...) comes
from its file name. The pages live in ``views/``, not ``pages/``: Streamlit auto-discovers
a ``pages/`` folder next to the entry point, and the first session of a freshly started
server that opened a deep link (``/compare?sweep=...``) then ran that page alone — no
sidebar, no demo, the folder's navigation — instead of this router.
"""

import streamlit as st

from lab import data, ui

st.set_page_config(page_title="Agent Q-Mix Lab", page_icon=":material/hub:", layout="wide")

PAGES = [
    st.Page("views/home.py", title="Overview", icon=":material/home:", default=True),
    st.Page("views/replay.py", title="Replay", icon=":material/movie:"),
    st.Page("views/train.py", title="Train", icon=":material/model_training:"),
    st.Page("views/failure_lab.py", title="Failure lab", icon=":material/bolt:"),
    st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("views/methods.py", title="Compare: methods", icon=":material/leaderboard:"),
    st.Page("views/diff.py", title="Run diff", icon=":material/difference:"),
    st.Page("views/sidebyside.py", title="Side by side", icon=":material/view_column_2:"),
    st.Page("views/ctde.py", title="CTDE explained", icon=":material/school:"),
    st.Page("views/runs.py", title="Runs", icon=":material/table_view:"),
]

db = data.db_path()
with ui.friendly():
    ui.ensure_demo(db)
page = st.navigation(PAGES)
ui.unknown_page_notice(PAGES, page)
ui.sidebar_status(db)
page.run()
