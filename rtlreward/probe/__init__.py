"""The verdict probe's folder: `rtlreward_probe.py` runs INSIDE the sandbox (see `rtlreward.verdict`).

This folder is put on a sandboxed command's PYTHONPATH as it is, so it holds nothing but the probe: every module
in it becomes importable by top-level name in the sandbox. The parent imports the same file as
`rtlreward.probe.rtlreward_probe` for the record format (one implementation of `sign` and `verify`).
"""
