"""A headless Chromium for the tests, driven by Selenium, with the network closed.

Used by tests/book/test_browser.py (the built book), and by test_jupyterlab.py and
test_jupyterlab_lessons.py (JupyterLab as a learner uses it, :func:`jupyterlab`).
Chromium and its driver are Debian's ``chromium`` and ``chromium-driver`` (``.ci/run``
installs them); without them :func:`require_chromium` skips the test and says why.

"Network closed": the browser resolves no host name except localhost, so any request that would
leave the machine fails, and :func:`outside_requests` lists every request a page attempted to a
host that is not local.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
LOCAL_HOSTS = ("127.0.0.1", "localhost")


def _which(names) -> str | None:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def require_chromium() -> tuple[str, str]:
    """(browser, driver) paths, or skip the calling test with the reason."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip(
            "browser tests need the Python package selenium (pip install selenium==4.51.0)"
        )
    # CHROMIUM / CHROMEDRIVER name other binaries than the ones on PATH.
    browser = _which(
        [os.environ["CHROMIUM"]] if os.environ.get("CHROMIUM") else CHROMIUM_NAMES
    )
    driver = _which(
        [os.environ["CHROMEDRIVER"]]
        if os.environ.get("CHROMEDRIVER")
        else ("chromedriver",)
    )
    if not browser or not driver:
        pytest.skip(
            "browser tests need Chromium and its driver: apt-get install chromium chromium-driver "
            f"(found browser={browser}, chromedriver={driver})"
        )
    return browser, driver


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_directory(root: Path):
    """Serve ``root`` on http://127.0.0.1:<port>/ in a thread; yields the base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def chromium(profile: Path, *, width: int = 1280, height: int = 1000):
    """A headless Chromium (Selenium WebDriver) that reaches localhost only and records console and network."""
    browser, driver_path = require_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile.mkdir(parents=True, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-default-apps",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        f"--user-data-dir={profile}",
        # The network is closed: only localhost resolves.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
        # ... and an address typed as an IP goes to a proxy that does not exist (loopback bypasses it).
        "--proxy-server=http://127.0.0.1:9",
    ):
        options.add_argument(flag)
    options.set_capability(
        "goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"}
    )
    # A given driver path keeps Selenium Manager (which would go to the network) out of the way.
    service = Service(
        executable_path=driver_path, log_output=str(profile / "chromedriver.log")
    )
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(90)
    driver.set_script_timeout(90)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[str]:
    """The console messages of level SEVERE (JavaScript errors, failed loads) since the last call."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] == "SEVERE"
    ]


def requested_urls(driver) -> list[str]:
    """Every URL the browser asked for since the last call (from the DevTools performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def outside_requests(urls) -> list[str]:
    """The URLs that would leave the machine."""
    from urllib.parse import urlsplit

    return [
        u
        for u in urls
        if urlsplit(u).scheme in ("http", "https", "ws", "wss")
        and urlsplit(u).hostname not in LOCAL_HOSTS
    ]


def wait_for(driver, script: str, *, timeout: float = 60, what: str = "", args=()):
    """Poll the JavaScript expression ``script`` (a function body returning a value) until truthy."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.25).until(
            lambda d: d.execute_script(script, *args)
        )
    except TimeoutException:
        pytest.fail(
            f"timed out after {timeout:.0f} s waiting for {what or script} on {driver.current_url}"
        )


def open_typeset(driver, page: Path, *, timeout: float = 30) -> None:
    """Open ``page`` (a file) and wait until MathJax has typeset its maths."""
    driver.get(page.as_uri())
    wait_for(
        driver,
        "return document.querySelectorAll('mjx-container').length > 0",
        timeout=timeout,
        what="MathJax's typesetting",
    )


@contextlib.contextmanager
def jupyterlab(course: Path, tmp_path: Path, env: dict | None = None):
    """A learner's JupyterLab serving ``course`` on 127.0.0.1; yields (base URL, token).

    The learner set-up of ``make env`` and of the course kit (tools/learner_lab.py: no
    news pop-up, no nbgrader instructor tools) goes into this server's own app settings
    folder, and every folder JupyterLab writes is under ``tmp_path``, not ~/.jupyter.
    """
    root = Path(__file__).resolve().parents[2]
    app_settings = tmp_path / "app-settings"
    subprocess.run(
        [
            sys.executable,
            str(root / "tools" / "learner_lab.py"),
            f"--settings-dir={app_settings}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    # Render every cell: by default JupyterLab leaves cells outside the window out of
    # the page, and the tests read all of them.
    tracker = (
        tmp_path
        / "settings"
        / "@jupyterlab"
        / "notebook-extension"
        / "tracker.jupyterlab-settings"
    )
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text('{"windowingMode": "none"}')
    token, port = secrets.token_hex(16), free_port()
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
        **(env or {}),
    )
    log_path = tmp_path / "jupyterlab.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--ip=127.0.0.1",
                f"--port={port}",
                f"--ServerApp.token={token}",
                f"--ServerApp.root_dir={course}",
                "--ServerApp.port_retries=0",
                f"--LabApp.app_settings_dir={app_settings}",
                "--LabApp.news_url=",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                # CI containers run as root; JupyterLab refuses that unless told.
                *(
                    ["--allow-root"]
                    if hasattr(os, "geteuid") and os.geteuid() == 0
                    else []
                ),
            ],
            cwd=course,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}/"
        try:
            deadline = time.monotonic() + 90
            while True:
                try:
                    with urllib.request.urlopen(
                        f"{base}api/status?token={token}", timeout=5
                    ) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        "JupyterLab did not start:\n" + log_path.read_text()[-4000:]
                    )
                time.sleep(0.5)
            yield base, token
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for_notebook(driver, *, timeout: float = 120) -> None:
    """Until the notebook of the current tab is open and its kernel idle."""
    wait_for(
        driver,
        "return document.querySelector('.jp-NotebookPanel .jp-Cell') !== null",
        timeout=timeout,
        what="the notebook to open",
    )
    wait_for(
        driver,
        "const s = document.querySelector("
        "'.jp-NotebookPanel-toolbar .jp-Notebook-ExecutionIndicator');"
        "return s !== null && s.getAttribute('data-status') === 'idle'",
        timeout=timeout,
        what="the kernel to be idle",
    )
