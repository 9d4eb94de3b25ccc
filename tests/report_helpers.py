"""Opening a report in headless Chromium (the Debian package) and reading back what rendered.

Two loads of the page, both with `--dump-dom` and Chromium's log on stderr (console messages, CSP violations and
load failures are logged as `:CONSOLE` lines):
1. the report itself, whose dumped DOM is what the browser built from the file;
2. a small wrapper page (ours, not the report: the report forbids scripts) that loads the report in an iframe
   (`--allow-file-access-from-files` makes the file same-origin) and writes, for every `section[data-section]`,
   its rendered height and how many of its SVG plots have a nonzero box, into its own DOM for the dump.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import attrs

WRAPPER = """<!doctype html><html><body><pre id="out">pending</pre>
<iframe id="f" src="REPORT" width="1280" height="900"></iframe>
<script>
document.getElementById('f').addEventListener('load', function () {
  var d = this.contentDocument, out = {};
  if (!d) { document.getElementById('out').textContent = 'NOACCESS'; return; }
  d.querySelectorAll('section[data-section]').forEach(function (s) {
    var r = s.getBoundingClientRect(), svgs = s.querySelectorAll('svg'), drawn = 0;
    svgs.forEach(function (g) { var b = g.getBoundingClientRect(); if (b.width > 1 && b.height > 1) drawn++; });
    out[s.dataset.section] = {height: r.height, svgs: svgs.length, drawn: drawn,
                              text: s.innerText.length, h2: (s.querySelector('h2') || {}).textContent || ''};
  });
  out.__scripts = d.querySelectorAll('script').length;
  document.getElementById('out').textContent = JSON.stringify(out);
});
</script></body></html>
"""


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@attrs.frozen
class Rendered:
    dom: str
    sections: dict
    console: list[str]


def _run(
    url: str, profile: Path, *, file_access: bool = False, timeout: float = 120
) -> tuple[str, list[str]]:
    exe = chromium()
    assert exe is not None
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",  # tests may run as root, where Chromium refuses its own sandbox
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *(["--allow-file-access-from-files"] if file_access else []),
        "--dump-dom",
        url,
    ]
    env = {**os.environ, "HOME": str(profile)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


def render(report: Path, tmp: Path) -> Rendered:
    report = report.resolve()
    dom, console = _run(report.as_uri(), tmp / "profile-1")
    wrapper = report.with_name(report.stem + ".wrapper.html")
    wrapper.write_text(WRAPPER.replace("REPORT", report.name))
    wdom, wconsole = _run(wrapper.as_uri(), tmp / "profile-2", file_access=True)
    m = re.search(r'<pre id="out">(.*?)</pre>', wdom, re.S)
    assert m is not None, wdom[:2000]
    raw = m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    assert raw not in ("pending", "NOACCESS"), raw
    return Rendered(dom=dom, sections=json.loads(raw), console=console + wconsole)
