"""The optional iCE40 flow: real timing after place and route, on the open tools Debian ships.

`synth_ice40` (Yosys) maps the design to iCE40 cells, `nextpnr-ice40` places and routes it for a device
(default the HX8K in its CT256 package) and reports the maximum frequency per clock (or, for combinational logic,
the longest path's delay). Figures: `luts` (SB_LUT4), `flip_flops` (SB_DFF*), `carries`, `fmax_mhz` (the slowest
clock's), `max_delay_ns`. Everything runs through the executor; where nextpnr-ice40 is not installed (the Docker
sim image does not carry it) the figures say `error: not available in this executor`, an error of the setting,
never a failure of the answer.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rtlreward.stage import StageContext
from rtlreward_hdl.files import strip_comments
from rtlreward_hdl.yosys import check_ident, check_path

from .flow import write_sources

_FMAX_RE = re.compile(r"Max frequency for clock '([^']*)': ([\d.]+) MHz")
_DELAY_RE = re.compile(r"Max delay (.+?)\s*-> (.+?)\s*: ([\d.]+) ns")
DEVICES = {"hx1k", "hx4k", "hx8k", "lp384", "lp1k", "lp4k", "lp8k", "up5k", "u4k"}
NOT_AVAILABLE = "not available in this executor (nextpnr-ice40 is not installed where designs run)"


def run(
    ctx: StageContext,
    work: Path,
    files: Mapping[str, str],
    top: str,
    opts: Mapping[str, Any],
    yosys_argv: Callable[[StageContext, str], list[str]],
) -> dict[str, Any]:
    """The iCE40 figures of one design, or {"error": why}."""
    device = str(opts.get("ice40_device") or "hx8k").lower()
    package = str(opts.get("ice40_package") or "ct256")
    if device not in DEVICES or not re.match(r"^[a-z0-9]+$", package):
        return {"error": f"unknown iCE40 device {device!r} or package {package!r}"}
    _, units = write_sources(work, files, strip_comments)
    incdirs = sorted({str(Path(u).parent) for u in units})
    mark = f"m{secrets.token_hex(8)}"
    script = "\n".join(
        [
            f"read_verilog -sv -noblackbox {' '.join(f'-I {check_path(d)}' for d in incdirs)} "
            + " ".join(check_path(u) for u in units),
            f"synth_ice40 -top {check_ident(top)} -json ice.json",
            "tee -q -o ice_stat.json stat -json",
            f"log -stderr {mark}",
            "",
        ]
    )
    (work / "ice.ys").write_text(script)
    seconds = float(opts.get("ice40_seconds", 60.0))
    res = ctx.run(
        yosys_argv(ctx, "ice.ys"), cwd=work, timeout=min(float(ctx.timeout), seconds), memory_mb=2048
    )
    if res.returncode != 0 or mark not in res.stderr:
        return {"error": "synth_ice40 failed" + (" (time limit)" if res.timed_out else "")}
    try:
        stat = json.loads((work / "ice_stat.json").read_text())
        by_type = (stat.get("design") or {}).get("num_cells_by_type") or {}
    except (OSError, ValueError):
        return {"error": "cannot read synth_ice40's figures"}
    out: dict[str, Any] = {
        "luts": int(by_type.get("SB_LUT4", 0)),
        "flip_flops": sum(int(v) for k, v in by_type.items() if k.startswith("SB_DFF")),
        "carries": int(by_type.get("SB_CARRY", 0)),
    }
    argv = ["nextpnr-ice40", f"--{device}", "--package", package, "--json", "ice.json", "--seed", "1"]
    argv += ["--freq", "12", "--quiet", "--log", "pnr.log"]
    pnr = ctx.run(argv, cwd=work, timeout=min(float(ctx.timeout), seconds), memory_mb=2048)
    if pnr.returncode == 127 or (
        "nextpnr-ice40" in (pnr.stderr or "") and "No such file" in (pnr.stderr or "")
    ):
        return {**out, "error": NOT_AVAILABLE}
    if pnr.timed_out or pnr.returncode != 0:
        return {
            **out,
            "error": "nextpnr-ice40 could not place and route the design"
            + (" in time" if pnr.timed_out else ""),
        }
    try:
        log = (work / "pnr.log").read_text(errors="replace")
    except OSError:
        log = pnr.output
    # nextpnr reports timing after placement and again after routing: the last report counts
    cut = log.rfind("Info: Routing")
    final = log[cut:] if cut >= 0 else log
    fmax = {clock: float(mhz) for clock, mhz in _FMAX_RE.findall(final)}
    if fmax:
        out["fmax_mhz"] = round(min(fmax.values()), 2)
    delays = [float(d) for _, _, d in _DELAY_RE.findall(final)]
    if delays:  # the longest path through a port (input to register, register to output, input to output)
        out["max_delay_ns"] = round(max(delays), 3)
    return out
