"""The real lab in a real browser: Streamlit on a free local port, driven by Debian's Chromium."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.lab.conftest import ROOT

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts" / "lab"
PAGES = ("", "replay", "train", "failure_lab", "compare", "ctde", "runs")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(seeded_db, tmp_path_factory):
    db, ids = seeded_db
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    env = {**os.environ, "AGENTQMIX_DB": str(db), "AGENTQMIX_LAB_DEMO": "0"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app.py",
                "--server.headless",
                "true",
                "--server.port",
                str(port),
                "--server.address",
                "127.0.0.1",
            ],  # fmt: skip
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                    if resp.read() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start:\n{log.read_text()}")
            time.sleep(0.3)
        yield url, ids
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
            ],  # fmt: skip
        )
        try:
            yield b
        finally:
            b.close()


def wait_idle(page, timeout_s: float = 30.0) -> None:
    """Wait until the script has finished running (no 'Running...' status)."""
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout_s * 1000)
    deadline = time.monotonic() + timeout_s
    quiet_since = None
    while time.monotonic() < deadline:
        state = page.get_attribute('[data-testid="stApp"]', "data-test-script-state")
        running = page.locator('[data-testid="stStatusWidget"]').filter(has_text="Running").count()
        if state != "running" and not running:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 0.6:
                return
        else:
            quiet_since = None
        time.sleep(0.1)
    raise AssertionError("the app did not become idle")


def test_every_page_renders_and_replay_plays(server, browser):
    url, _ = server
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # Streamlit scrolls inside its own container, so a tall window is what shows a whole page.
    page = browser.new_page(viewport={"width": 1440, "height": 2200})
    for name in PAGES:
        page.goto(f"{url}/{name}")
        wait_idle(page)
        page.wait_for_selector("h1", timeout=20_000)
        if name in ("replay", "train", "failure_lab", "compare", "ctde"):
            page.wait_for_selector(".js-plotly-plot", timeout=20_000)
        errors = page.locator('[data-testid="stException"]')
        assert errors.count() == 0, f"{name or 'home'}: {errors.first.inner_text()}"
        page.screenshot(path=str(ARTIFACTS / f"{name or 'home'}.png"), full_page=True)

    # Replay: the Streamlit play button moves the round slider and every panel with it.
    page.goto(f"{url}/replay")
    wait_idle(page)
    slider = page.locator('[data-testid="stSlider"] input[type="range"]').first
    assert slider.input_value() == "0"
    heading = page.get_by_text("Round 0 of 2")
    assert heading.count() == 1
    page.get_by_role("button", name="Play rounds").click()
    # The round slider and the panel heading both move on without another click.
    page.wait_for_function(
        '() => { const s = document.querySelector(\'[data-testid="stSlider"] input[type="range"]\');'
        " return s && Number(s.value) >= 1; }",
        timeout=15_000,
    )
    page.get_by_text("Round 2 of 2").wait_for(timeout=15_000)
    # The graph's own Plotly animation plays too.
    page.locator(".js-plotly-plot").first.get_by_text("▶ Play").click()
    page.wait_for_timeout(1500)
    assert page.locator('[data-testid="stException"]').count() == 0
    page.screenshot(path=str(ARTIFACTS / "replay-playing.png"), full_page=True)
    page.close()
