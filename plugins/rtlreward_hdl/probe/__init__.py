"""The HDL library's probe hooks, run INSIDE the sandbox by rtlreward's verdict probe (`rtlreward.verdict`).

This folder goes on a probed process's PYTHONPATH as it is, so it holds nothing but the hook modules:
`rtlreward_cocotb_probe` (a simulator's cocotb regression) and `rtlreward_pytest_probe` (a pytest session that
launches simulators, e.g. a CVDP harness). Standard library only; `rtlreward_hdl.probes` is the parent's side.
"""
