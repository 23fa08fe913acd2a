"""The HTML reports as a reader sees them: `irqlab reproduce`'s page and
`irqlab report`'s sweep page, opened in headless Chromium (Debian's chromium
and chromium-driver, installed by `make setup`) through selenium. Each must
show its table and its plots (inline PNGs the browser decodes), log no error
to the browser console, and give a screenshot that is not blank.

Nothing here is timed: the page loads are waited for with generous limits."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from helpers import assert_ok, run_cli

#: Figures whose parts the reproduce page is checked for: an M1 pair of runs, and
#: the M5 NIC figure with its policy study, its tornado plot and its latency percentiles.
FIGURES = ("m1-gettid", "m5-nic-100g")
LOAD_TIMEOUT_S = 120
#: A screenshot of a page with tables and plots; a blank 1280x1600 PNG is a few kB.
MIN_SCREENSHOT_BYTES = 30_000


def _need(cmd: str) -> str:
    path = shutil.which(cmd)
    if path is None:
        pytest.fail(
            f"{cmd} is not on PATH: the browser test needs Debian's chromium and chromium-driver "
            "(`make browser`, or apt-get install chromium chromium-driver)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="module")
def browser(request: pytest.FixtureRequest) -> webdriver.Chrome:
    opts = webdriver.ChromeOptions()
    # Both paths given: selenium's driver manager, which would download a browser, is never asked.
    opts.binary_location = _need("chromium")
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1600",
        "--hide-scrollbars",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=_need("chromedriver")))
    request.addfinalizer(driver.quit)
    driver.set_page_load_timeout(LOAD_TIMEOUT_S)
    driver.set_script_timeout(LOAD_TIMEOUT_S)
    return driver


def open_page(driver: webdriver.Chrome, page: Path) -> None:
    driver.get_log("browser")  # what an earlier page logged is not this one's
    driver.get(page.resolve().as_uri())
    WebDriverWait(driver, LOAD_TIMEOUT_S).until(lambda d: d.execute_script("return document.readyState") == "complete")
    # Every image decoded (or failed), however slow the machine.
    WebDriverWait(driver, LOAD_TIMEOUT_S).until(
        lambda d: d.execute_script("return Array.from(document.images).every(i => i.complete)")
    )


def images(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """Every <img>: its alt text, whether its source is an inline PNG, and the
    width the browser decoded (0: broken)."""
    found: list[dict[str, Any]] = driver.execute_script(
        "return Array.from(document.images).map(i => ({alt: i.alt, "
        "png: i.getAttribute('src').startsWith('data:image/png;base64,'), width: i.naturalWidth}))"
    )
    return found


def console_errors(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def screenshot(driver: webdriver.Chrome, dest: Path) -> None:
    assert driver.save_screenshot(str(dest)), dest
    data = dest.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n"), dest
    assert len(data) > MIN_SCREENSHOT_BYTES, f"{dest}: {len(data)} bytes, a blank page?"


def check_plots(driver: webdriver.Chrome, *alts: str) -> list[dict[str, Any]]:
    imgs = images(driver)
    assert imgs, "no plot on the page"
    broken = [i["alt"] for i in imgs if not i["png"] or i["width"] <= 0]
    assert not broken, f"plots that are no inline PNG or did not decode: {broken}"
    have = {i["alt"] for i in imgs}
    missing = [a for a in alts if a not in have]
    assert not missing, f"plots missing: {missing}; the page has {sorted(have)}"
    return imgs


@pytest.fixture(scope="module")
def reproduce_page(bundled_report: tuple[subprocess.CompletedProcess[str], Path]) -> Path:
    """The bundled `irqlab reproduce`'s page (a session fixture the other
    report tests read too), the largest page a user opens."""
    p, out = bundled_report
    assert_ok(p)
    return out / "index.html"


@pytest.fixture(scope="module")
def sweep_page(tmp_path_factory: pytest.TempPathFactory, small: Path) -> Path:
    d = tmp_path_factory.mktemp("browser-sweep")
    grid = ["--grid", "source.0.rate=50k/s,100k/s,200k/s", "--grid", "cpu.irq_entry=200ns,1us"]
    assert_ok(run_cli("sweep", small, *grid, "--replications", "3", "--out", d / "results", "-q"))
    assert_ok(run_cli("report", d / "results", "--out", d / "report"))
    return d / "report" / "index.html"


def test_the_reproduce_report_shows_its_figures_plots_and_traces(
    browser: webdriver.Chrome, reproduce_page: Path, tmp_path: Path
) -> None:
    open_page(browser, reproduce_page)
    assert browser.title == "irqlab: published-figure reproductions"
    table = browser.find_element(By.ID, "figures")
    heads = [th.text for th in table.find_elements(By.TAG_NAME, "th")]
    assert {"figure", "kind", "published", "simulated", "status"} <= set(heads), heads
    rows = table.find_elements(By.CSS_SELECTOR, "tr.pass, tr.miss, tr.fail")
    figures = json.loads((reproduce_page.parent / "figures.json").read_text())["figures"]
    assert len(rows) == len(figures) > 20, [r.text for r in rows]  # every bundled figure, a row each
    text = table.text
    assert "94.1 Gbit/s" in text and "ns/call" in text and "e+0" not in text, text
    assert "prediction" in text and "fit: task.0.body" in text
    check_plots(
        browser,
        "errors of all figures in units of their tolerance; predictions filled, fits hollow",
        "m5-nic-100g: variants side by side",
        "m5-nic-100g: nic.eth.latency percentiles per variant",
        "m5-nic-100g: tornado of nic.eth.goodput_gbps",
    )
    links = {a.get_attribute("href").rsplit("/", 1)[-1] for a in browser.find_elements(By.CSS_SELECTOR, "a")}
    for f in FIGURES:
        assert f"trace-{f}.pftrace" in links, links
        assert (reproduce_page.parent / f"trace-{f}.pftrace").stat().st_size > 0
    assert "ui.perfetto.dev" in browser.find_element(By.TAG_NAME, "body").text
    errors = console_errors(browser)
    assert not errors, errors
    screenshot(browser, tmp_path / "reproduce.png")


def test_the_sweep_report_shows_its_plots_and_table(
    browser: webdriver.Chrome, sweep_page: Path, tmp_path: Path
) -> None:
    open_page(browser, sweep_page)
    assert browser.title == "irqlab sweep: small"
    imgs = check_plots(browser, "interrupts_per_s against source.0.rate")
    assert len(imgs) >= 2  # the interrupt rate and at least one latency p99
    table = browser.find_element(By.ID, "results")
    rows = table.find_elements(By.TAG_NAME, "tr")
    assert len(rows) == 1 + 3 * 2, table.text  # a row per grid point
    assert "±" in table.text and "k/s" in table.text
    assert "95 % confidence interval" in browser.find_element(By.TAG_NAME, "body").text
    errors = console_errors(browser)
    assert not errors, errors
    screenshot(browser, tmp_path / "sweep.png")
