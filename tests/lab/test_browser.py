"""The real lab in a real browser, started exactly as the README does it.

``bash scripts/lab.sh`` ends in ``agentqmix lab``; here ``python -m core.cli lab`` runs on a
fresh, empty database with a fresh HOME (Streamlit has never run: no credentials file)
and stdin closed (no terminal), on a free local port. Debian's Chromium, driven by
Playwright, watches the first-start demo's progress, opens every page (at phone width
here, on two wide screens in the second test), follows a deep link and plays the replay. Screenshots go to
``test-artifacts/lab/``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from core.store.queries import count_episodes, list_runs, load_episode
from core.team.topologies import FIXED_TOPOLOGIES
from lab import asked, real_demo
from lab.demo import DemoConfig, expected_episodes, read_status
from lab.params import PAGE_PARAMS
from tests.lab.conftest import ROOT

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts" / "lab"
PAGES = ("", "replay", "train", "failure_lab", "compare", "diff", "ctde", "runs")
CHART_PAGES = ("replay", "train", "failure_lab", "compare", "sidebyside", "ctde")
"""The pages that draw a chart as soon as they open."""

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.read() == b"ok"
    except OSError:
        return False


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """``agentqmix lab`` on an empty database, as a first-time user starts it."""
    tmp = tmp_path_factory.mktemp("first-start")
    home = tmp / "home"
    home.mkdir()
    db = tmp / "lab.duckdb"
    port = _free_port()
    log = tmp / "terminal.log"
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("AGENTQMIX_LAB_DEMO", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "core.cli", "lab", "--db", str(db), "--port", str(port)],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the lab did not start:\n{log.read_text()}")
            time.sleep(0.2)
        yield url, db, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
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


def wait_idle(page, timeout_s: float = 45.0) -> None:
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


def open_from_sidebar(page, name: str) -> None:
    """Open page ``name`` as a reader does, from the sidebar's navigation, and wait until it
    has drawn: the app stays loaded, where ``page.goto`` reloads Streamlit's JavaScript and
    starts a new session (a load cost Chromium 5-7 CPU-seconds, a sidebar visit 2-3:
    benchmarks/RESULTS.md). Links, which do load a page, are tried with ``goto`` where a test
    is about them. At phone width the sidebar is opened for the click and closed again."""
    main_title = '[data-testid="stMain"] h1'
    before = page.locator(main_title).first.inner_text()
    expand = page.get_by_role("button", name="Expand sidebar")
    narrow = expand.is_visible()  # the sidebar is folded away on a phone
    if narrow:
        expand.click()
    nav = page.locator('[data-testid="stSidebarNav"]')
    nav.locator(f'a[href$="/{name}"]').first.click()
    page.wait_for_url(lambda u: urllib.parse.urlsplit(u).path == f"/{name}", timeout=60_000)
    # Every page's title differs: once the title is another, the page's script has run.
    page.wait_for_function(
        "([sel, old]) => { const h = document.querySelector(sel); return h && h.innerText !== old; }",
        arg=[main_title, before], timeout=60_000,
    )  # fmt: skip
    if narrow:
        page.get_by_role("button", name="Collapse sidebar").click()
    wait_idle(page)


def _no_exception(page, where: str) -> None:
    errors = page.locator('[data-testid="stException"]')
    assert errors.count() == 0, f"{where}: {errors.first.inner_text()}"


def _boxes_overlap(a: dict | None, b: dict | None, slack: float = 2.0) -> bool:
    """Whether two boxes overlap by more than ``slack`` px (touching edges do not count)."""
    if not a or not b:
        return False
    return not (
        a["x"] + a["width"] <= b["x"] + slack
        or b["x"] + b["width"] <= a["x"] + slack
        or a["y"] + a["height"] <= b["y"] + slack
        or b["y"] + b["height"] <= a["y"] + slack
    )


def _check_layout(page, name: str, width: int) -> None:
    """Legends never cover a chart's plot area, and no table runs off the right edge."""
    for k in range(page.locator(".js-plotly-plot").count()):
        plot = page.locator(".js-plotly-plot").nth(k)
        area = plot.locator(".nsewdrag").first
        legend = plot.locator(".legend")
        if area.count() and legend.count():
            assert not _boxes_overlap(area.bounding_box(), legend.first.bounding_box()), (
                f"{name} at {width}px: chart {k}'s legend covers its plot"
            )
        if not legend.count():
            continue
        box = legend.first.bounding_box()
        for part in (".g-gtitle text", ".xtitle", ".xaxislayer-above .xtick text"):
            for n in range(plot.locator(part).count()):
                assert not _boxes_overlap(plot.locator(part).nth(n).bounding_box(), box), (
                    f"{name} at {width}px: chart {k}'s legend overlaps {part}"
                )
    for k in range(page.locator('[data-testid="stDataFrame"]').count()):
        box = page.locator('[data-testid="stDataFrame"]').nth(k).bounding_box()
        if box and box["width"] > 0:
            assert box["x"] + box["width"] <= width + 1, f"{name} at {width}px: table {k} cut off"


def test_first_start_demo_pages_and_a_deep_link(lab, browser):
    url, db, log = lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "first-start.png").unlink(missing_ok=True)
    page = browser.new_page(viewport={"width": 1440, "height": 1800})

    # 0. The server's very first session opens a deep link: the router runs (its sidebar and
    # page titles), not a page alone (Streamlit's auto-discovered pages/ folder did that).
    page.goto(f"{url}/runs")
    page.get_by_text("Database:").first.wait_for(timeout=60_000)
    nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
    assert "Overview" in nav and "CTDE explained" in nav, nav

    # 1. The demo started with the server (not with this page) and shows real progress here.
    page.goto(url)
    page.wait_for_selector('[data-testid="stMain"]', timeout=60_000)
    seen: set[int] = set()
    # A hang guard, not a speed goal: the demo's ~30 CPU-s took 6 min at load 25-48.
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        text = page.locator('[data-testid="stMain"]').inner_text()
        seen |= {int(v) for v in re.findall(r"Demo (\d+)%", text)}
        if 0 < max(seen, default=0) < 100 and not (ARTIFACTS / "first-start.png").exists():
            page.screenshot(path=str(ARTIFACTS / "first-start.png"), full_page=True)
        if "Latest runs" in text and "Preparing a demo" not in text:
            break
        time.sleep(0.3)
    assert "Preparing a demo" not in page.locator('[data-testid="stMain"]').inner_text(), (
        "the demo never ended"
    )
    assert any(0 < v < 100 for v in seen), f"no progress between 0 and 100 % was shown: {seen}"
    # The same progress in the terminal, and no e-mail prompt on a first start.
    terminal = log.read_text()
    assert f"Agent Q-Mix Lab: {url}" in terminal and "Email" not in terminal
    shown = [int(v) for v in re.findall(r"^demo +(\d+)%", terminal, re.MULTILINE)]
    assert len({v for v in shown if 0 < v < 100}) >= 3 and "demo ready" in terminal
    assert shown == sorted(shown), "terminal progress went backwards"
    # The demo logged exactly what it set out to (so its progress bar measured real work).
    assert count_episodes(db) == sum(expected_episodes(DemoConfig(), len(FIXED_TOPOLOGIES)))
    _no_exception(page, "home")

    # 2. Every page at phone width (the wide screens are the second test's), each opened from
    # the sidebar; the home page, open already, last.
    page.set_viewport_size({"width": 390, "height": 2400})
    for name in (*PAGES[1:], PAGES[0]):
        open_from_sidebar(page, name)
        if name in CHART_PAGES:
            page.wait_for_selector(".js-plotly-plot", timeout=20_000)
        _no_exception(page, name or "home")
        _check_layout(page, name or "home", 390)
        page.screenshot(path=str(ARTIFACTS / f"{name or 'home'}-390.png"), full_page=True)
    page.set_viewport_size({"width": 1440, "height": 2200})

    # 3. A deep link opens that episode at that round.
    runs = list_runs(db, kind="eval")
    run_id = runs.iloc[0]["id"]
    # An episode of a maths or multiple-choice task from #5 on: a code task's long prompt is
    # shown shortened in the middle, where its round line sits (checked below).
    shown_ep = next(k for k in range(5, 400) if load_episode(db, run_id, k).record.domain != "code")
    page.goto(f"{url}/replay?run={run_id}&episode={shown_ep}&round=3")
    wait_idle(page)
    page.get_by_text("Round 3 of 3").first.wait_for(timeout=20_000)
    assert page.get_by_role("combobox", name="Run").input_value().startswith(run_id)
    episode = page.locator('input[role="combobox"][aria-label^="Episode ("]')
    assert episode.input_value().startswith(f"#{shown_ep} · ")
    slider = page.locator('[data-testid="stSlider"] input[type="range"]').first
    assert slider.input_value() == "3"
    page.screenshot(path=str(ARTIFACTS / "replay-deep-link.png"), full_page=True)
    # What an agent was asked: the society has no real prompt, so the openai back-end's
    # prompt for that turn is rebuilt and shown role by role (the first agent that called).
    asked_box = page.locator('[data-testid="stExpander"]').filter(has_text="What it was asked")
    tabs = page.get_by_role("tab")
    shown = None
    for k in range(tabs.count()):
        tabs.nth(k).click()
        visible = [j for j in range(asked_box.count()) if asked_box.nth(j).is_visible()]
        if visible:
            shown = asked_box.nth(visible[0])
            break
    assert shown is not None, "no agent tab shows what it was asked"
    shown.locator("summary").click()
    shown.get_by_text(asked.REBUILT).wait_for(timeout=20_000)
    blocks = shown.locator('[data-testid="stCode"]')
    assert blocks.count() == 2  # system, user
    assert blocks.nth(0).inner_text().startswith("You are a member of a small team")
    assert "Problem:" in blocks.nth(1).inner_text() and "Round 3 of 3" in blocks.nth(1).inner_text()
    assert page.get_by_text("Calls of the round").count() == 1
    _no_exception(page, "replay prompt")
    page.screenshot(path=str(ARTIFACTS / "replay-asked.png"), full_page=True)

    # The picker shows the episode the page shows after the listing changes under it (it
    # used to keep showing the old pick: "#0 · mcq-088" above episode #193's card).
    for box, option in (("Sort by", "reward, worst first"), ("Result", "wrong")):
        # Typed, as a reader can: the open list's options were not always found under load.
        page.get_by_role("combobox", name=box).click()
        page.keyboard.type(option)
        page.keyboard.press("Enter")
        wait_idle(page)
        picked = episode.input_value()
        shown = page.locator('[data-testid="stMain"]').get_by_text(" — ").first.inner_text()
        task = shown.rsplit(" — ", 1)[1]
        assert f" · {task} · " in picked and f"episode={picked[1:].split(' ')[0]}&" in page.url, (
            f"after {box} = {option}: the picker says {picked!r}, the page shows {task}"
        )

    # 4. Compare: a click on a point opens the episodes behind it, and the URL keeps it.
    open_from_sidebar(page, "compare")
    page.wait_for_selector(".js-plotly-plot .scatterlayer .trace .points path", timeout=30_000)
    wait_idle(page)
    point = page.locator(".js-plotly-plot").first.locator(".scatterlayer .trace .points path")
    point.first.click(force=True)
    page.get_by_text("episodes (up to 500 listed)").first.wait_for(timeout=20_000)
    page.wait_for_function("() => location.search.includes('point=')", timeout=20_000)
    page.screenshot(path=str(ARTIFACTS / "compare-clicked.png"), full_page=True)

    # 5. One control: the graph has no Play button or slider of its own; Play moves every panel.
    assert page.locator(".js-plotly-plot .updatemenu-container").count() == 0
    assert page.locator(".js-plotly-plot .slider-container").count() == 0
    page.goto(f"{url}/replay?run={run_id}&episode={shown_ep}&round=1")
    wait_idle(page)
    page.get_by_text("Round 1 of 3").first.wait_for(timeout=20_000)
    page.get_by_role("button", name="Play rounds").click()
    page.get_by_text("Round 3 of 3").first.wait_for(timeout=20_000)
    # The URL follows the round: written by the same rerun that drew it, a moment after the
    # text (read at once, a loaded machine saw round=2 there).
    page.wait_for_function("() => location.search.includes('round=3')", timeout=20_000)
    _no_exception(page, "replay playing")
    page.screenshot(path=str(ARTIFACTS / "replay-played.png"), full_page=True)
    page.close()


# ---------------------------------------------------------------- hostile links, readable charts

HOSTILE = {
    "garbage": "garbage",
    "nan": "NaN",
    "negative": "-1",
    "huge": "9" * 30,
    "missing": "",
}
"""Values every query parameter of every page is tried with (``missing``: ``?name=``)."""

FREE_TEXT = {("replay", "q")}
"""Parameters any text is a valid value of (a search): left out of the tour (a search for
"garbage" matches nothing, and the page rightly says only that)."""

_CHART_TEXT = """
(plot) => {
  const svg = plot.querySelector('.main-svg').getBoundingClientRect();
  const kinds = {annotation: '.annotation .annotation-text-g', xtick: '.xtick text',
                 ytick: '.ytick text', legend: '.legendtext', label: '.textpoint text, .bartext',
                 title: '.g-xtitle text, .g-ytitle text'};
  const out = [];
  for (const [kind, sel] of Object.entries(kinds)) {
    plot.querySelectorAll(sel).forEach(el => {
      const r = el.getBoundingClientRect();
      const t = (el.textContent || '').trim();
      if (r.width > 0 && r.height > 0 && t)
        out.push({kind, text: t, x: r.x, y: r.y, width: r.width, height: r.height});
    });
  }
  return {svg: {x: svg.x, y: svg.y, width: svg.width, height: svg.height}, boxes: out};
}
"""


def chart_text_problems(page, where: str) -> list[str]:
    """Text Plotly drew that is clipped by its chart's edge, or that overlaps other text of
    the same chart (annotations, point and bar labels, tick labels, legend entries)."""
    problems = []
    for k in range(page.locator(".js-plotly-plot").count()):
        plot = page.locator(".js-plotly-plot").nth(k)
        if not plot.is_visible():
            continue
        got = plot.evaluate(_CHART_TEXT)
        svg, boxes = got["svg"], got["boxes"]
        for b in boxes:
            inside = (
                b["x"] >= svg["x"] - 1 and b["y"] >= svg["y"] - 1
                and b["x"] + b["width"] <= svg["x"] + svg["width"] + 1
                and b["y"] + b["height"] <= svg["y"] + svg["height"] + 1
            )  # fmt: skip
            if not inside:
                problems.append(f"{where} chart {k}: {b['kind']} {b['text']!r} is clipped")
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                if a["kind"] == b["kind"] == "title":
                    continue
                if _boxes_overlap(a, b):
                    problems.append(
                        f"{where} chart {k}: {a['kind']} {a['text']!r} overlaps "
                        f"{b['kind']} {b['text']!r}"
                    )
    return problems


_CUT_OFF = """
(root) => {
  // Text the page draws cut off: a label, button, tab, caption or heading whose text is
  // wider than its box where the box clips it (ellipsis, or hidden overflow on one line),
  // and a table whose columns do not all fit (the caller excepts wide listings with a
  // pinned first column). Select boxes are left out: their options show in full when
  // opened; chart text is chart_text_problems'.
  const out = [];
  const shown = (el) => {
    const r = el.getBoundingClientRect();
    return r.width > 1 && r.height > 1 && r.right > 0 && r.bottom > 0;
  };
  root.querySelectorAll('*').forEach(el => {
    if (el.closest('[data-baseweb="select"], [data-testid="stSkipLink"], .js-plotly-plot'))
      return;
    if (!shown(el) || el.scrollWidth <= el.clientWidth + 1) return;
    const text = Array.from(el.childNodes)
      .filter(n => n.nodeType === 3).map(n => n.textContent).join('').trim();
    if (!text) return;
    const cs = getComputedStyle(el);
    const clips = cs.textOverflow === 'ellipsis'
      || (cs.overflowX !== 'visible' && cs.whiteSpace.startsWith('nowrap'));
    if (clips) out.push(`text ${JSON.stringify(text.slice(0, 60))} is cut off`);
  });
  root.querySelectorAll('[data-testid="stDataFrame"]').forEach((frame, k) => {
    const grid = frame.querySelector('.dvn-scroller');
    if (!grid || !shown(grid) || grid.scrollWidth <= grid.clientWidth + 1) return;
    out.push(`table ${k} needs ${grid.scrollWidth - grid.clientWidth}px more: columns off-screen`);
  });
  return out;
}
"""


def cut_off_problems(page, where: str, pinned: tuple[int, ...] = ()) -> list[str]:
    """Text the page cuts off (:data:`_CUT_OFF`), tables ``pinned`` (their index on the page:
    a pinned first column, scrolled sideways by design) excepted."""
    found = page.locator('[data-testid="stApp"]').evaluate(_CUT_OFF)
    return [
        f"{where}: {p}" for p in found if not any(p.startswith(f"table {k} needs") for k in pinned)
    ]


WIDE_LISTINGS = {"runs": (0,), "compare": (0,), "diff": (0,)}
"""Tables that scroll sideways by design, their key columns pinned (page → table indices on
the page): the run listing, Compare's table of points and the task-by-task diff."""


def hostile_query(names: tuple[str, ...], start: int) -> dict[str, str]:
    """One hostile value for each parameter, the :data:`HOSTILE` kinds taken in turn from
    ``start``, plus ``bogus`` (a parameter no page has) with ``garbage``."""
    kinds = list(HOSTILE)
    query = {p: HOSTILE[kinds[(start + j) % len(kinds)]] for j, p in enumerate(names)}
    return {**query, "bogus": HOSTILE["garbage"]}


def hostile_link_problems(page, url: str, pages: dict[str, tuple[str, ...]]) -> list[str]:
    """Open every page once with a hostile value in every one of its query parameters at
    once (the :data:`HOSTILE` kinds in turn across parameters and pages, so every kind meets
    several pages), plus one it does not have: no exception, and each bad parameter named
    on the page. (A page load costs seconds in a browser; tests/lab/test_page_state.py
    tries single bad values under AppTest.)"""
    problems = []
    for k, (name, names) in enumerate(pages.items()):
        names = tuple(p for p in names if (name, p) not in FREE_TEXT)
        query = hostile_query(names, k)
        page.goto(f"{url}/{name}?" + "&".join(f"{p}={v}" for p, v in query.items()))
        # The stray parameter is always named, first: once its warning is there the script
        # runs, and idle then means it has said all it will say.
        page.get_by_text("bogus=").first.wait_for(timeout=60_000)
        wait_idle(page)
        where = f"/{name}?…"
        errors = page.locator('[data-testid="stException"]')
        if errors.count():
            problems.append(f"{where}: {errors.first.inner_text()[:200]}")
            continue
        said = " ".join(page.locator('[data-testid="stAlert"]').all_inner_texts())
        for p, value in query.items():
            if f"{p}={value}"[:30] not in said and f"{p}=" not in said:
                problems.append(f"{where}: nothing says `{p}={value}` was not used")
    return problems


SIZES = ((1280, 800), (1920, 1080))
"""The screens every page is looked at on (docs/lab.md shows both)."""

DOCS = ROOT / "docs" / "lab"


def _wait_demo(db, timeout_s: float = 900.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (status := read_status(db)) is None or status.live:
        assert time.monotonic() < deadline, "the demo did not finish"
        time.sleep(0.5)
    assert status.state == "finished", status.error


def test_hostile_links_readable_charts_and_an_exported_episode(lab, browser, tmp_path):
    url, db, _ = lab
    _wait_demo(db)
    page = browser.new_page(viewport={"width": 1280, "height": 800})

    # 1. Every page, every parameter: garbage, NaN, negative, huge or missing, in turn.
    pages = {("" if k == "home" else k): v for k, v in PAGE_PARAMS.items()}
    kinds_met = {kind for k, names in enumerate(pages.values()) for kind in (
        next(key for key, v in HOSTILE.items() if v == value)
        for value in hostile_query(names, k).values()
    )}  # fmt: skip
    assert kinds_met == set(HOSTILE), f"the tour leaves out {set(HOSTILE) - kinds_met}"
    # A page that does not exist is named on the page it lands on, not only in a dialog
    # (first: the tour below must end on /runs).
    page.goto(f"{url}/doesnotexist")
    page.get_by_text("There is no page `/doesnotexist`").or_(
        page.get_by_text("There is no page /doesnotexist")
    ).first.wait_for(timeout=60_000)
    page.keyboard.press("Escape")
    problems = hostile_link_problems(page, url, pages)
    assert not problems, "\n".join(problems)

    # 2. Every chart of every page at both sizes: no text clipped or on top of other text, no
    # legend over a plot, no table past the right edge. Each page is opened from the sidebar
    # (the tour above ended on the last page, /runs; each size starts from the home page).
    # The screenshots are docs/lab.md's (refreshed with AGENTQMIX_DOCS_SHOTS=1).
    shots = DOCS if os.environ.get("AGENTQMIX_DOCS_SHOTS") == "1" else ARTIFACTS / "sizes"
    shots.mkdir(parents=True, exist_ok=True)
    assert list(pages)[0] == "" and list(pages)[-1] == "runs"
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        for name in pages:
            open_from_sidebar(page, name)
            if name in CHART_PAGES:
                page.wait_for_selector(".js-plotly-plot", timeout=30_000)
                wait_idle(page)
            _no_exception(page, name or "home")
            _check_layout(page, name or "home", width)
            problems += chart_text_problems(page, f"/{name} at {width}×{height}")
            problems += cut_off_problems(
                page, f"/{name} at {width}×{height}", WIDE_LISTINGS.get(name, ())
            )
            page.screenshot(path=str(shots / f"{name or 'home'}-{width}x{height}.png"))
    assert not problems, "\n".join(problems)

    # 3. An episode's HTML animation opens with no server and steps through its rounds.
    run_id = list_runs(db, kind="eval").iloc[0]["id"]
    page.goto(f"{url}/replay?run={run_id}&episode=2")
    wait_idle(page)
    with page.expect_download(timeout=60_000) as download:
        page.get_by_role("button", name="HTML animation").click()
    saved = tmp_path / "episode.html"
    download.value.save_as(saved)
    offline = browser.new_page()
    errors: list[str] = []
    offline.on("pageerror", lambda e: errors.append(str(e)))
    offline.on("request", lambda r: r.url.startswith("http") and errors.append(r.url))
    offline.goto(saved.as_uri())
    offline.wait_for_selector("#graph .main-svg", timeout=20_000)
    assert offline.inner_text("#label") == "round 1 of 3"
    offline.click("#next")
    assert offline.inner_text("#label") == "round 2 of 3"
    assert not errors, errors
    offline.close()

    # 4. Picked in the sidebar, SVG is what a chart's camera then saves: vector graphics.
    page.set_viewport_size({"width": 1280, "height": 800})  # the sidebar shown
    open_from_sidebar(page, "compare")
    page.get_by_role("radio", name="SVG", exact=True).click()  # a segmented control
    wait_idle(page)
    plot = page.locator(".js-plotly-plot").first
    plot.hover()
    with page.expect_download(timeout=60_000) as download:
        plot.locator('.modebar-btn[data-title^="Download plot"]').click()
    assert download.value.suggested_filename.endswith(".svg")
    svg = tmp_path / "chart.svg"
    download.value.save_as(svg)
    assert svg.read_text()[:200].lstrip().startswith("<svg")
    page.close()


# ---------------------------------------------------------------- a real model's episode


def test_replay_shows_what_the_local_model_wrote(lab, browser, local_env, tmp_path):
    """One episode of the real-model demo's command (made tiny: two agents, one round, 16
    tokens a call) on the session's llama.cpp server, logged into the running lab's
    database; Replay in the browser shows the real replies and says which back-end and
    model played."""
    url, db, _ = lab
    _wait_demo(db)
    small = real_demo.RealDemoConfig(episodes=1, roles=("solver", "analyst"), rounds=1)
    argv = real_demo.real_demo_command(str(db), small) + ["--max-tokens", "16", "--no-cache"]
    done = subprocess.run(
        argv, cwd=ROOT, env={**os.environ, **local_env, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    runs = list_runs(db, kind="eval")
    run = runs[runs["backend"] == "local"].iloc[0]
    record = load_episode(db, run["id"], 0).record
    wrote = [s.text.strip() for rnd in record.rounds for s in rnd.steps if s.text.strip()]
    assert wrote and record.model.startswith("SmolLM2-135M")

    page = browser.new_page(viewport={"width": 1440, "height": 2200})
    page.goto(f"{url}/replay?run={run['id']}&episode=0&round=1")
    wait_idle(page)
    page.get_by_text("Round 1 of 1").first.wait_for(timeout=20_000)
    _no_exception(page, "replay of a real episode")
    main = page.locator('[data-testid="stMain"]')
    tabs = page.get_by_role("tab")
    shown = main.inner_text()
    for k in range(tabs.count()):  # each agent's reply sits in its own tab
        tabs.nth(k).click()
        shown += " " + main.inner_text()
    flat = " ".join(shown.split())
    missing = [t[:40] for t in wrote if " ".join(t[:40].split()) not in flat]
    assert not missing, f"replies not shown: {missing}"
    assert "SmolLM2-135M" in flat and "local" in flat
    page.screenshot(path=str(ARTIFACTS / "replay-real-episode.png"), full_page=True)
    page.close()
