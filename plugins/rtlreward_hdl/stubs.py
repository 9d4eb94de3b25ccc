"""Do-nothing designs with the task's interface: the baseline partial credit is measured above.

A policy learns a stub long before it learns hardware: a module whose outputs are tied to 0 passes every sample
of a testbench where the reference's output is mostly 0 (measured: 1.32 of 1.6 under `shaped` on a VerilogEval
problem). So a stage that pays partial credit measures it above what these stubs earn on the same task
(`rtlreward_tests`, the equivalence stage's own constant baseline), and `rtlreward tasks check` reports them.

The stubs: every output tied to 0 (`zeros`), tied to 1 (`ones`), left undriven (`undriven`), or driven by the
first data input (`passthrough`: not a clock or reset by name; Verilog resizes it to the output's width). Where
there is no such input, there is no `passthrough` stub.
"""

from __future__ import annotations

import re

from rtlreward.model import Task
from rtlreward_hdl.files import HDL_EXTS
from rtlreward_hdl.interface import expected_interface

__all__ = ["STUB_KINDS", "stub_designs"]

STUB_KINDS = ("zeros", "ones", "undriven", "passthrough")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL_RE = re.compile(r"(?i)(clk|clock|rst|reset|clr)")


def _port(direction: str, width: int, name: str) -> str:
    rng = f"[{width - 1}:0] " if width > 1 else ""
    kind = "wire " if direction != "output" else "logic "
    return f"  {direction} {kind}{rng}{name}"


def stub_designs(task: Task) -> dict[str, dict[str, str]]:
    """{kind: {answer path: text}} for the task's top module, or {} when the interface is not known well enough to
    write one (no answer path, a port of unknown width, an escaped name, an inout)."""
    iface = expected_interface(task)
    paths = [p for p in task.expected_files if p.lower().endswith(HDL_EXTS)]
    if iface is None or not paths or not iface.ports or not _IDENT_RE.match(iface.module):
        return {}
    if any(
        p.width is None or p.direction not in ("input", "output") or not _IDENT_RE.match(p.name)
        for p in iface.ports
    ):
        return {}
    header = f"module {iface.module} (\n" + ",\n".join(
        _port(p.direction, p.width or 1, p.name) for p in iface.ports
    )
    header += "\n);\n"
    outputs = [p for p in iface.ports if p.direction == "output"]
    data = [p for p in iface.ports if p.direction == "input" and not _CONTROL_RE.search(p.name)]
    out: dict[str, dict[str, str]] = {}
    for kind in STUB_KINDS:
        if kind == "undriven":
            body = ""
        elif kind == "passthrough":
            if not data:
                continue
            body = "".join(f"  assign {p.name} = {data[0].name};\n" for p in outputs)
        else:
            bit = "0" if kind == "zeros" else "1"
            body = "".join(f"  assign {p.name} = {{{p.width}{{1'b{bit}}}}};\n" for p in outputs)
        out[kind] = {paths[0]: f"// rtlreward stub: outputs {kind}\n{header}{body}endmodule\n"}
    return out
