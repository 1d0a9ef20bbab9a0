"""A minimal headless-Chromium driver over the DevTools protocol (no Selenium): navigate, click by text or
CSS selector (waiting for the element), read the page's text and links, take a screenshot. Used by the
Dagster UI test."""

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from cohort.devtools.embedded_broker import free_port

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def chromium_binary() -> str | None:
    """Debian's chromium, if installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One browser tab driven through its DevTools websocket."""

    def __init__(self, websocket_url: str) -> None:
        self._connection = contextlib.ExitStack()  # websockets wants its connections used as context managers
        self._ws = self._connection.enter_context(connect(websocket_url, max_size=64 * 1024 * 1024, open_timeout=30))
        self._ids = count(1)

    def call(self, method: str, timeout_s: float = 30.0, **params: Any) -> dict[str, Any]:
        call_id = next(self._ids)
        self._ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            message = json.loads(self._ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def text(self) -> str:
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def wait_for_text(self, needle: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.text()
            if needle in text:
                return text
            time.sleep(0.5)
        raise AssertionError(f"{needle!r} did not appear within {timeout_s} s; the page shows:\n{self.text()[:2000]}")

    def wait_until(self, predicate: Callable[[str], bool], what: str, timeout_s: float = 30.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.text()
            if predicate(text):
                return text
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")

    def click_text(self, text: str, selector: str = "button, a, span, div, td") -> bool:
        """Click the innermost element matching `selector` whose text is exactly `text`; False if none."""
        script = f"""(() => {{
            const wanted = {json.dumps(text)};
            const all = [...document.querySelectorAll({json.dumps(selector)})]
                .filter(e => e.innerText && e.innerText.trim() === wanted);
            const innermost = all.filter(e => !all.some(o => o !== e && e.contains(o)));
            if (!innermost.length) return false;
            innermost[0].click();
            return true;
        }})()"""
        return bool(self.evaluate(script))

    def click(self, text: str, *, selector: str = "button, a, span, div, td", timeout_s: float = 30.0) -> None:
        """Click the innermost element matching `selector` whose text is exactly `text`, once it appears."""
        deadline = time.monotonic() + timeout_s
        while not self.click_text(text, selector):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no {selector!r} reads {text!r} within {timeout_s} s; the page shows:\n{self.text()[:3000]}"
                )
            time.sleep(0.5)

    def click_selector(self, selector: str, *, timeout_s: float = 30.0) -> None:
        """Click the first element matching the CSS `selector`, once it appears."""
        script = f"""(() => {{
            const element = document.querySelector({json.dumps(selector)});
            if (!element) return false;
            element.scrollIntoView({{block: "center"}});
            element.click();
            return true;
        }})()"""
        deadline = time.monotonic() + timeout_s
        while not self.evaluate(script):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"nothing matches {selector!r} within {timeout_s} s; the page shows:\n{self.text()[:3000]}"
                )
            time.sleep(0.5)

    def type_into(self, selector: str, text: str, *, timeout_s: float = 30.0) -> None:
        """Focus the first element matching the CSS `selector` (once it appears) and type `text` into it, as
        a keyboard would (the page's own input handlers see it)."""
        focus = f"""(() => {{
            const element = document.querySelector({json.dumps(selector)});
            if (!element) return false;
            element.scrollIntoView({{block: "center"}});
            element.focus();
            return document.activeElement === element;
        }})()"""
        self.wait_for_js(focus, f"an element matching {selector!r} to focus", timeout_s=timeout_s)
        self.call("Input.insertText", text=text)

    def wait_for_js(self, expression: str, what: str, timeout_s: float = 30.0) -> Any:
        """Wait until the JavaScript `expression` is truthy in the page; its value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")

    def links(self) -> list[str]:
        """The `href` attribute of every link on the page, as written (relative ones stay relative)."""
        return self.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))") or []

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self._connection.close()


def _pages(port: int) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as answer:
            return [t for t in json.loads(answer.read()) if t.get("type") == "page"]
    except (OSError, ValueError):
        return []


@contextlib.contextmanager
def headless_chromium(width: int = 1400, height: int = 1000) -> Iterator[Page]:
    """Start headless Chromium with remote debugging on a free port; yield its first tab; stop it."""
    binary = chromium_binary()
    if binary is None:
        raise RuntimeError("chromium is not installed (make system-deps installs Debian's chromium)")
    port = free_port()
    profile = tempfile.mkdtemp(prefix="cohort-chromium-")
    process = subprocess.Popen(
        [
            binary,
            *CHROMIUM_FLAGS,
            f"--remote-debugging-port={port}",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    page = None
    try:
        deadline = time.monotonic() + 60
        targets: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not targets:
            targets = _pages(port)
            time.sleep(0.3)
        if not targets:
            raise RuntimeError("chromium did not open a debuggable page within 60 s")
        page = Page(targets[0]["webSocketDebuggerUrl"])
        page.call("Page.enable")
        yield page
    finally:
        if page is not None:
            page.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)
