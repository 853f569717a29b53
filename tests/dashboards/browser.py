"""Headless Debian Chromium through Selenium, cut off from the network.

Every host but 127.0.0.1 resolves to nothing and every non-loopback request goes to a dead
proxy, so a page that needs the internet (a CDN script) visibly fails to load, while a server on
127.0.0.1 (optuna-dashboard) is reached directly.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

OFFLINE_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",  # the discard port: nothing listens there
    "--proxy-bypass-list=127.0.0.1",
    "--window-size=1400,1000",
)


@contextmanager
def offline_chromium() -> Iterator[webdriver.Chrome]:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.fail("Debian's chromium and chromium-driver are required (see the README's setup)")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in (*OFFLINE_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        # Selenium Manager would try to download a driver; the Service names Debian's.
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
        try:
            yield driver
        finally:
            driver.quit()
