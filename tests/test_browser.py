"""The HTML report in a real browser: headless Chromium renders the sample build's report and the MIMIC-III demo's.

The tests build the sample with ``badpoints build --html`` (and validate the real demo with ``--html``, where its
tables are), serve the output folder on 127.0.0.1, and drive Debian's ``chromium`` through the DevTools protocol
over a pipe (``--remote-debugging-pipe``: file descriptors 3 and 4, NUL-separated JSON, so no websocket library is
needed). They fail on any console error, uncaught exception or browser log error (a blocked network request is one,
as the page's Content-Security-Policy forbids them all), check that the charts and the findings tables are there and
that a table sorts, that the first screen at 1,400 x 900 shows the status and the actions, that nothing overflows a
900 px wide page (every ``<details>`` open or not), that the findings are in ``<details>`` and that the z chart names
its items; and save screenshots in the test's tmp folder (``BADPOINTS_SCREENSHOT=PATH`` also copies the top of the
sample's page to PATH, for the README).

Without chromium the test is skipped, except under CI (``CI`` set), where it fails: ``.ci/run`` installs it.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import json
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
BADPOINTS = Path(sys.executable).with_name("badpoints")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-debugging-pipe")
WIDTH = 1280


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        if _in_ci():
            pytest.fail("chromium is not installed; .ci/run installs it (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (CI installs it: apt-get install -y chromium)")
    return path


class DevTools:
    """A Chromium started with --remote-debugging-pipe, and the DevTools protocol spoken over it."""

    def __init__(self, chromium: str, profile: Path, log: Path) -> None:
        to_child, self._write = os.pipe()
        self._read, from_child = os.pipe()
        # The child must get the pipes as fds 3 and 4; lift ours above 9 so the shell's redirections never clash.
        to_child, from_child = (self._high(fd) for fd in (to_child, from_child))
        command = ["bash", "-c", f'exec "$0" "$@" 3<&{to_child} 4>&{from_child} {to_child}<&- {from_child}>&-',
                   chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"]
        self.log = log
        with open(log, "wb") as stderr:
            self.process = subprocess.Popen(command, pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL,
                                            stdout=stderr, stderr=stderr)
        os.close(to_child)
        os.close(from_child)
        self._buffer = b""
        self._id = 0
        self.events: list[dict] = []

    @staticmethod
    def _high(fd: int) -> int:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
        os.close(fd)
        return high

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError(f"no answer from chromium; its log: {self.log_tail()}")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise EOFError(f"chromium closed the pipe; its log: {self.log_tail()}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, *, session: str | None = None,
             timeout: float = 30.0) -> dict:
        """Send a command and return its result; events that arrive meanwhile are kept in ``events``."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._message(deadline)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_for(self, method: str, *, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method:
                    return event
            self.events.append(self._message(deadline))

    def evaluate(self, expression: str, *, session: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=session)
        if "exceptionDetails" in result:
            raise AssertionError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (OSError, EOFError, TimeoutError, RuntimeError):
            pass
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass


def problems_in(events: list[dict]) -> list[str]:
    """Console errors, uncaught exceptions and browser log errors (blocked or failed requests)."""
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            found.append("console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in
                                                      params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            found.append("exception: " + json.dumps(params.get("exceptionDetails", {}))[:500])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            found.append(f"log {entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
    return found


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


class _Quiet(SimpleHTTPRequestHandler):
    requested: list[str] = []

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self.requested.append(self.path)
        super().do_GET()


@contextlib.contextmanager
def serving(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """``folder``'s report.html served on 127.0.0.1 at a free port: its URL, and the paths requested."""
    handler = type("Handler", (_Quiet,), {"requested": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/report.html", handler.requested
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def served_report(tmp_path_factory):
    """The sample's build, its report served on 127.0.0.1 at a free port."""
    out = tmp_path_factory.mktemp("build")
    done = subprocess.run([str(BADPOINTS), "build", "data/sample", "--out", str(out), "--html",
                           str(out / "report.html"), "--quiet"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "report.html").is_file()
    with serving(out) as served:
        yield served


@pytest.fixture(scope="module")
def served_demo(tmp_path_factory, mimic3demo):
    """The real MIMIC-III demo's validation report, served on 127.0.0.1 (skipped where the demo is absent)."""
    out = tmp_path_factory.mktemp("demo")
    done = subprocess.run([str(BADPOINTS), "validate", str(mimic3demo), "--no-cache", "--html",
                           str(out / "report.html"), "--quiet"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert (out / "report.html").is_file()
    with serving(out) as served:
        yield served, mimic3demo


@contextlib.contextmanager
def opened(chromium: str, tmp_path: Path, url: str, *, width: int, height: int) -> Iterator[tuple[DevTools, str]]:
    """A Chromium showing ``url`` in a ``width`` x ``height`` viewport, loaded: the browser and its page's
    session."""
    browser = DevTools(chromium, tmp_path / "profile", tmp_path / "chromium.log")
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            browser.call(f"{domain}.enable", session=session)
        viewport(browser, session, width=width, height=height)
        navigation = browser.call("Page.navigate", {"url": url}, session=session)
        assert "errorText" not in navigation, navigation
        browser.wait_for("Page.loadEventFired")
        yield browser, session
    finally:
        browser.close()


def viewport(browser: DevTools, session: str, *, width: int, height: int) -> None:
    browser.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                        "mobile": False}, session=session)


def test_report_renders_in_chromium_without_console_errors(chromium, served_report, tmp_path):
    url, requested = served_report
    with opened(chromium, tmp_path, url, width=WIDTH, height=1000) as (browser, session):
        page = browser.evaluate("""JSON.stringify({
            title: document.title,
            status: document.getElementById('status').textContent,
            sections: Array.from(document.querySelectorAll('section')).map(s => s.id),
            charts: Array.from(document.querySelectorAll('figure svg')).map(s => {
                const box = s.getBoundingClientRect(); return [s.closest('figure').id, box.width, box.height]; }),
            rows: document.querySelectorAll('table.findings tbody tr').length,
            scripts: Array.from(document.scripts).map(s => s.src)
        })""", session=session)
        page = json.loads(page)
        assert page["status"] == "status: warnings" and page["title"] == "badpoints build: warnings"
        assert {"actions", "findings", "attrition", "zscores", "items", "missingness", "splits", "graphs"} <= set(
            page["sections"])
        assert {c[0] for c in page["charts"]} == {"fig-funnel", "fig-zscores", "fig-graph-sizes"}
        assert all(width > 300 and height > 100 for _, width, height in page["charts"]), page["charts"]
        assert page["rows"] >= 10 and page["scripts"] == [""]

        height = browser.call("Page.getLayoutMetrics", session=session)["cssContentSize"]["height"]
        shots = {}
        for name, clip_height in (("report-full.png", height), ("report.png", min(height, 1600))):
            shot = browser.call("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": WIDTH, "height": clip_height, "scale": 1}}, session=session)
            shots[name] = base64.b64decode(shot["data"])
            (tmp_path / name).write_bytes(shots[name])
        counts = browser.evaluate("""(() => {  // the stage with the most findings, sorted by count
            const table = Array.from(document.querySelectorAll('table.findings'))
                .sort((a, b) => b.tBodies[0].rows.length - a.tBodies[0].rows.length)[0];
            const column = Array.from(table.querySelectorAll('th')).findIndex(th => th.textContent === 'count');
            table.querySelectorAll('th')[column].click();
            return Array.from(table.tBodies[0].rows).map(r => parseFloat(r.cells[column].dataset.sort));
        })()""", session=session)
        assert len(counts) > 2 and counts == sorted(counts) and counts != list(reversed(sorted(counts)))  # sorted

        browser.evaluate("1", session=session)  # a last round trip: late console messages arrive before it
        problems = problems_in(browser.events)

    assert not problems, problems
    assert set(requested) <= {"/report.html", "/favicon.ico"} and "/report.html" in requested, requested
    assert png_size(shots["report.png"])[0] == WIDTH and png_size(shots["report-full.png"])[1] > 2000
    if os.environ.get("BADPOINTS_SCREENSHOT"):
        target = Path(os.environ["BADPOINTS_SCREENSHOT"])
        shutil.copyfile(tmp_path / "report.png", target)
        shutil.copyfile(tmp_path / "report-full.png", target.with_name(f"{target.stem}-full{target.suffix}"))


LAYOUT = """JSON.stringify({
    height: document.documentElement.scrollHeight,
    width: document.documentElement.scrollWidth,
    status: document.getElementById('status').getBoundingClientRect().bottom,
    actions: document.getElementById('actions').getBoundingClientRect().bottom,
    listed: document.querySelectorAll('#actions li').length,
    findings: Array.from(document.querySelectorAll('table.findings')).map(t => {
        const group = t.closest('details'); return group ? group.id : null; }),
    labels: Array.from(document.querySelectorAll('#fig-zscores svg text')).map(t => t.textContent)
})"""


def _layout(browser: DevTools, session: str) -> dict:
    return json.loads(browser.evaluate(LAYOUT, session=session))


@pytest.fixture(params=["sample", "demo"])
def served_page(request) -> tuple[str, Path]:
    """The sample's report and the MIMIC-III demo's (skipped where the demo is absent), with its data folder."""
    if request.param == "sample":
        url, _ = request.getfixturevalue("served_report")
        return url, ROOT / "data" / "sample"
    (url, _), folder = request.getfixturevalue("served_demo")
    return url, folder


def test_the_first_screen_shows_the_status_and_the_actions_and_nothing_overflows_at_900_px(chromium, served_page,
                                                                                          tmp_path):
    """At 1,400 x 900 the status and the actions lie within the first screen; at 900 px wide the page does not
    scroll sideways, its <details> closed or all opened; every findings table is in a stage's <details>; the z
    chart's labels name the items as D_LABITEMS does."""
    from pipeline.reporting.findings import item_names
    from pipeline.reading.load import read_table

    url, folder = served_page
    with opened(chromium, tmp_path, url, width=1400, height=900) as (browser, session):
        wide = _layout(browser, session)
        viewport(browser, session, width=900, height=900)
        narrow = _layout(browser, session)
        viewport(browser, session, width=1400, height=900)
        tallest = browser.evaluate("""(() => {  // every stage's findings open, their long cells not
            document.querySelectorAll('details[id^="findings-"]').forEach(d => { d.open = true; });
            return Math.max(...Array.from(document.querySelectorAll('table.findings td'))
                .map(td => td.getBoundingClientRect().height));
        })()""", session=session)
        viewport(browser, session, width=900, height=900)
        browser.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })", session=session)
        narrow_open = _layout(browser, session)
        browser.evaluate("1", session=session)
        problems = problems_in(browser.events)

    assert not problems, problems
    assert 0 < wide["status"] <= wide["actions"] <= 900 and 1 <= wide["listed"] <= 5, wide  # one per warned check
    assert narrow["width"] <= 900 and narrow_open["width"] <= 900, (narrow["width"], narrow_open["width"])
    assert wide["findings"] and all(group and group.startswith("findings-") for group in wide["findings"])
    assert 0 < tallest <= 300, f"a findings cell {tallest} px tall at 1,400 px"
    names = item_names(read_table(folder / "D_LABITEMS.csv", "D_LABITEMS").frame)
    labels = [label for label in wide["labels"] if re.match(r"\d+ ", label)]
    assert labels, wide["labels"]
    for label in labels:
        item, name = label.split(" ", 1)
        assert name.rstrip("\u2026") and names[int(item)].startswith(name.rstrip("\u2026")), label
