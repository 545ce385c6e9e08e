"""Agent Q-Mix Lab: the Streamlit entry point, a thin router over the files in pages/.

Run with ``agentqmix lab`` (which also starts the first-start demo with the server) or
``streamlit run app.py``; the database is ``$AGENTQMIX_DB`` (default ``./agentqmix.duckdb``).
Because this file calls ``st.navigation``, Streamlit does not auto-discover ``pages/``:
every page is listed here; each page's address (``/replay``...) comes from its file name.
"""

import streamlit as st

from lab import data, ui

st.set_page_config(page_title="Agent Q-Mix Lab", page_icon=":material/hub:", layout="wide")

PAGES = [
    st.Page("pages/home.py", title="Overview", icon=":material/home:", default=True),
    st.Page("pages/replay.py", title="Replay", icon=":material/movie:"),
    st.Page("pages/train.py", title="Train", icon=":material/model_training:"),
    st.Page("pages/failure_lab.py", title="Failure lab", icon=":material/bolt:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("pages/diff.py", title="Run diff", icon=":material/difference:"),
    st.Page("pages/ctde.py", title="CTDE explained", icon=":material/school:"),
    st.Page("pages/runs.py", title="Runs", icon=":material/table_view:"),
]

db = data.db_path()
with ui.friendly():
    ui.ensure_demo(db)
page = st.navigation(PAGES)
ui.sidebar_status(db)
page.run()
