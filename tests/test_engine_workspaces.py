"""Workspaces a killed rtlreward left behind are removed by the next engine on the host, and never a live one's."""

from __future__ import annotations

import subprocess
import sys

from engine_helpers import registry

from rtlreward.engine import Engine
from rtlreward.model import Task

SCRIPT = """
import os, sys, time
from rtlreward.sandbox.reaper import make_workspace
ws = make_workspace("victim", sys.argv[1])
(ws / "half_written.sv").write_text("module m; endmodule")
print(ws, flush=True)
time.sleep(600)
"""


def test_a_killed_runs_workspace_is_removed_by_the_next_engine(tmp_path):
    root = tmp_path / "ws"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(root)], stdout=subprocess.PIPE, text=True)
    left = proc.stdout.readline().strip()
    assert left and (root.exists())
    live = subprocess.Popen([sys.executable, "-c", SCRIPT, str(root)], stdout=subprocess.PIPE, text=True)
    alive = live.stdout.readline().strip()
    try:
        proc.kill()  # kill -9: no cleanup of its own
        proc.wait()
        assert any(p.name in left for p in root.iterdir())
        engine = Engine(
            {"name": "t", "stages": ["format"], "verdict": "format", "weights": {"format": 1.0}},
            cache=False,
            registry=registry(),
            workspace_root=root,
        )
        with engine:
            reward = engine.score(Task(id="t"), "anything")
        assert reward.stages["format"].status.value in ("passed", "failed")
        names = {p.name for p in root.iterdir()}
        assert not any(n in left for n in names), "the dead run's workspace is gone"
        assert any(n in alive for n in names), "a live run's workspace is never touched"
        assert len(names) == 1  # and the engine removed its own after scoring
    finally:
        live.kill()
        live.wait()
