"""The library the built-in HDL stages and harness runners share. It is not a plugin (no entry point, no hooks):
stages import it, and it imports only the core.

- `files`: HDL file extensions, comment stripping, which files elaborate together, include checks
- `slang`: pyslang parsing (ports, modules, preprocessed system names)
- `preprocess`: what Icarus and Verilator see after their own preprocessors (system names, directives, DPI,
  with the answer's file and line), and the include checks that come first; the safety gate and `simrun` read it
- `interface`: the interface a task expects (reference, spec, harness signals)
- `icarus`, `verilator`: finding the tools and reading their messages as diagnostics
- `simrun`: running an answer against a self-checking Verilog testbench (VerilogEval, RTLLM)
- `data`: where benchmark data lives
"""
