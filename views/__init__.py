"""The lab's pages, one Streamlit script each, run by app.py's router (``st.navigation``).

Nothing imports this package: it is a package so that import-linter checks what the pages
import (pyproject.toml: pages use ``lab`` and ``core.experiment``, and the shared vocabulary
``core.actions``, ``core.records``, ``core.errors``; everything else reaches them through
``lab``).
"""
