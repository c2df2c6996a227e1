"""Pages opened as a person sees them: headless Chromium at 1280 x 800, and what it made
of the page read back from the DOM (tests/test_pages.py, tests/test_reports.py).

A probe script appended to a test-only copy of the page measures the page once it has
loaded and writes what it found into the attributes of a mark it adds to the document;
`--dump-dom` prints the document, and the mark's attributes are read from it.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: CI sets it where it installed Chromium: a missing browser fails the checks there
REQUIRED = os.environ.get("TRAINSCALE_BROWSER_CHECK") == "required"
WIDTH, HEIGHT = 1280, 800
#: the flags a headless Chromium needs on a closed machine (no sandbox as root, no
#: background connections)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)

#: appended to the copy: the page's width against the window's, its images, its tables
#: (those with no row in their body are empty), and the text of what `data-read` names
PROBE = """<script>
window.addEventListener("load", function () {
  var images = Array.from(document.images);
  var loaded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  var tables = Array.from(document.querySelectorAll("table"));
  var empty = tables.filter(function (t) {
    var body = t.tBodies.length ? t.tBodies[0] : t;
    return body.querySelectorAll("tr").length === 0 ||
      (t.tHead && t.tBodies.length && t.tBodies[0].rows.length === 0);
  });
  // a wide table scrolls in its own box (.table): counted where it must
  var scrolled = Array.from(document.querySelectorAll(".table")).filter(function (box) {
    return box.scrollWidth > box.clientWidth;
  });
  var read = {};
  (document.body.getAttribute("data-read") || "").split(";").filter(Boolean).forEach(
    function (selector) {
      read[selector] = Array.from(document.querySelectorAll(selector)).map(function (e) {
        return {text: e.textContent.trim(), title: e.getAttribute("title")};
      });
    });
  var mark = document.createElement("div");
  mark.id = "browser-check";
  mark.setAttribute("data-scroll-width", String(document.documentElement.scrollWidth));
  mark.setAttribute("data-client-width", String(document.documentElement.clientWidth));
  mark.setAttribute("data-images", String(images.length));
  mark.setAttribute("data-loaded", String(loaded.length));
  mark.setAttribute("data-tables", String(tables.length));
  mark.setAttribute("data-empty-tables", String(empty.length));
  mark.setAttribute("data-scrolled-tables", String(scrolled.length));
  mark.setAttribute("data-scrolled", JSON.stringify(scrolled.map(function (box) {
    var head = box.querySelector("th");
    return [head ? head.textContent : "", box.scrollWidth, box.clientWidth];
  })));
  mark.setAttribute("data-read", JSON.stringify(read));
  document.body.appendChild(mark);
});
</script>"""


def chromium(*args: str, profile: Path, height: int = HEIGHT) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with a window of 1280 x `height` (a test that gets here without
    it fails: where Chromium is optional, the test is marked to skip first)."""
    if CHROMIUM is None:
        raise AssertionError("TRAINSCALE_BROWSER_CHECK=required but no chromium on PATH")
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={WIDTH},{height}",
         *args],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
    )


def browse(page: Path, work: Path, read: tuple[str, ...] = ()) -> dict[str, object]:
    """Open a copy of `page` (in `work`) with the probe; what it found: the widths,
    images, tables, and per CSS selector in `read` the text and title of each match."""
    text = page.read_text(encoding="utf-8")
    text = text.replace("<body>", f'<body data-read="{";".join(read)}">', 1)
    copy = work / f"probe-{page.parent.name}-{page.name}"
    copy.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    result = chromium("--virtual-time-budget=10000", "--dump-dom", copy.as_uri(),
                      profile=work / "profile")  # fmt: skip
    mark = re.search(r'<div id="browser-check"([^>]*)>', result.stdout)
    assert mark is not None, (
        f"no probe in the DOM (exit {result.returncode}): {result.stderr[-500:]}"
    )
    found: dict[str, object] = {}
    for key, value in re.findall(r'data-([a-z-]+)="([^"]*)"', mark.group(1)):
        value = html.unescape(value)
        found[key] = json.loads(value) if key in ("read", "scrolled") else int(value)
    return found


def screenshot(page: Path, png: Path, work: Path, height: int = HEIGHT) -> None:
    """A picture of the page's first `height` pixels at 1280 wide."""
    result = chromium("--virtual-time-budget=10000", f"--screenshot={png}", page.as_uri(),
                      profile=work / "profile", height=height)  # fmt: skip
    assert png.exists(), f"no screenshot (exit {result.returncode}): {result.stderr[-500:]}"
