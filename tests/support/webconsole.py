"""The web console for tests: the real app served by uvicorn on a loopback port (in a
thread of the test process), and headless Chromium driven by Selenium.

Chromium and its driver are Debian's (``apt-get install chromium chromium-driver``);
Selenium is pointed at them so it never tries to download a browser.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from mailout.web import WebSettings, create_app

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ADMIN_TOKEN = "admin-token-for-tests-0123456789"  # test credentials
READONLY_TOKEN = "readonly-token-for-tests-98765"
MAIL_FROM = "Shop <shop@example.com>"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "templates"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "web"


def console_settings(**overrides: Any) -> WebSettings:
    values: dict[str, Any] = {"token": ADMIN_TOKEN, "readonly_token": READONLY_TOKEN,
                              "templates_dir": EXAMPLES, "mail_from": MAIL_FROM}
    values.update(overrides)
    return WebSettings(**values)


class ConsoleServer:
    """An ASGI app served by uvicorn on 127.0.0.1 in a background thread."""

    def __init__(self, app: Any) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> ConsoleServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the console server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@contextmanager
def serve_console(db_url: str, **kw: Any) -> Iterator[ConsoleServer]:
    """The console for ``db_url`` (settings from :func:`console_settings` unless given)."""
    kw.setdefault("settings", console_settings())
    app = create_app(db_url, **kw)
    with ConsoleServer(app) as server:
        yield server
    app.state.console.engine.dispose()


def chromium() -> WebDriver:
    """Headless Chromium, 1400x1000, via Debian's chromedriver."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--disable-extensions", "--no-first-run",
                "--disable-background-networking", "--disable-sync", "--lang=en-US"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    return driver


def log_in(driver: WebDriver, base: str, name: str, token: str) -> None:
    """Sign in through the login form (a fresh browser state for ``base``)."""
    driver.delete_all_cookies()
    driver.get(base + "/login")
    driver.find_element(By.ID, "login-name").send_keys(name)
    driver.find_element(By.ID, "login-token").send_keys(token)
    navigate(driver, By.ID, "login-submit")
    if not driver.find_elements(By.ID, "identity"):
        raise AssertionError("sign-in failed: " + driver.find_element(By.ID, "login-error").text)


_LEAVING = "window.__mailoutLeaving = true"
_NEW_PAGE_LOADED = "return !window.__mailoutLeaving && document.readyState === 'complete'"


def navigate(driver: WebDriver, by: str, value: str) -> None:
    """Click the element that leads to another page, and wait until that page has loaded.

    The old page is marked with a script variable, and the wait is for a loaded document
    without it. Waiting for the old ``<html>`` element to go stale instead raced the
    navigation: chromedriver can fail on a node it is tearing down with an "unhandled
    inspector error" rather than report it stale. While the pages change over, any
    WebDriver error is retried; if no new page loads, the wait times out.
    """
    driver.execute_script(_LEAVING)
    driver.find_element(by, value).click()
    WebDriverWait(driver, 15, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(_NEW_PAGE_LOADED))


def screenshot(driver: WebDriver, name: str) -> Path:
    """Save a full-page PNG under tests/artifacts/web/ and return its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, max(1000, min(int(height) + 40, 4000)))
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    return path


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
