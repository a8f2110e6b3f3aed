"""Headless Chromium driven over the DevTools protocol (Debian's `chromium`, no browser download):
open a page, wait for a condition in it, read values, take a screenshot. For pages that keep working
after their load event (a web app), where `chromium --screenshot` fires too early."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from itertools import count
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class ChromiumPage:
    def __init__(self, profile: Path, width: int = 1600, height: int = 1000, offline: bool = False):
        # offline: every request but to 127.0.0.1 goes to a closed port (as on a machine without network)
        no_network = ["--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=127.0.0.1"] if offline else []
        self.process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader",
             "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", *no_network, "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = self._port(profile)
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=64 << 20, open_timeout=10)
        self._ids = count(1)

    def _port(self, profile: Path, timeout: float = 30) -> int:
        marker = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def goto(self, url: str) -> None:
        self.call("Page.enable")
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        got = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return got.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        """Poll `expression` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise TimeoutError(f"the page never satisfied: {expression}")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> ChromiumPage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
