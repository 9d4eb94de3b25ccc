"""Seeds for harness code, so the same (task, answer) draws the same stimulus and gets the same reward.

cocotb seeds its own `random` from `COCOTB_RANDOM_SEED` (older cocotb: `RANDOM_SEED`), but harness code often
draws values elsewhere: a CVDP `test_runner.py` parametrises pytest over `random.randint(...)` at import time,
before cocotb exists. A `sitecustomize.py` on PYTHONPATH runs at every interpreter start (the driver, pytest and
the Python embedded in the simulator), so seeding `random` there covers all of them. numpy is seeded lazily, the
moment it is first imported, so interpreters that never use it do not pay for importing it.

The same file starts rtlreward's verdict probe (`rtlreward.verdict`) when the runner gave the process a key: it
must run before anything else is imported, and every harness interpreter already starts here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

SEED_VAR = "RTLREWARD_SEED"

SITECUSTOMIZE = '''\
"""Written by rtlreward.seeding: seeds Python's random (and numpy when imported) from RTLREWARD_SEED."""
import os as _os
import sys as _sys

if _os.environ.get("RTLREWARD_PROBE_KEY"):
    # rtlreward.verdict's probe: first, before this file imports anything a harness folder could shadow. A process
    # given a key that cannot start the probe must not run at all (its key file would stay readable).
    try:
        import rtlreward_probe  # noqa: F401
    except BaseException as _exc:
        _os.write(2, ("rtlreward: cannot start the verdict probe: %r\\n" % (_exc,)).encode())
        _os._exit(97)

_seed = _os.environ.get("RTLREWARD_SEED")
if _seed is not None:
    try:
        _seed = int(_seed)
    except ValueError:
        _seed = None
if _seed is not None:
    import random as _random

    _random.seed(_seed)

    def _seed_numpy(module):
        try:
            module.random.seed(_seed % (1 << 32))
        except Exception:
            pass

    if "numpy" in _sys.modules:
        _seed_numpy(_sys.modules["numpy"])
    else:
        import importlib.abc as _abc
        import importlib.machinery as _machinery

        class _NumpySeeder(_abc.MetaPathFinder):
            """Seeds numpy's global generator right after `import numpy` finishes."""

            def find_spec(self, name, path=None, target=None):
                if name != "numpy":
                    return None
                _sys.meta_path.remove(self)
                spec = _machinery.PathFinder.find_spec(name, path)
                if spec is None or spec.loader is None:
                    return spec
                loader = spec.loader
                exec_module = loader.exec_module

                def _exec(module):
                    exec_module(module)
                    _seed_numpy(module)

                try:
                    loader.exec_module = _exec
                except Exception:
                    pass
                return spec

        _sys.meta_path.insert(0, _NumpySeeder())
'''


def write_sitecustomize(site_dir: Path) -> Path:
    """Write the seeding `sitecustomize.py` into `site_dir` (created) and return the folder.

    The file does not depend on the seed (it reads RTLREWARD_SEED), so one folder can serve every run; write it
    where the sandbox can read it, e.g. inside the candidate's workspace.
    """
    site_dir = Path(site_dir)
    site_dir.mkdir(parents=True, exist_ok=True)
    dest = site_dir / "sitecustomize.py"
    if not dest.exists() or dest.read_text() != SITECUSTOMIZE:
        tmp = site_dir / f".sitecustomize.{os.getpid()}.tmp"
        tmp.write_text(SITECUSTOMIZE)
        tmp.replace(dest)
    return site_dir


def _default_site_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rtlreward" / "seedsite"


def seed_env(
    seed: int, base_pythonpath: Sequence[str] = (), site_dir: Path | str | None = None
) -> dict[str, str]:
    """Environment variables that make harness code deterministic for `seed`.

    Returns COCOTB_RANDOM_SEED and RANDOM_SEED (cocotb 2 and older), RTLREWARD_SEED, PYTHONHASHSEED (set order,
    dict-of-set iteration) and PYTHONPATH = the seeding folder, then `base_pythonpath`. Pass `site_dir` inside
    the workspace when the command runs in a sandbox that hides the home folder (the default is
    ~/.cache/rtlreward/seedsite). A `sitecustomize.py` elsewhere on the path is shadowed by ours.
    """
    seed = int(seed) % (1 << 32)
    folder = write_sitecustomize(Path(site_dir) if site_dir is not None else _default_site_dir())
    return {
        SEED_VAR: str(seed),
        "COCOTB_RANDOM_SEED": str(seed),
        "RANDOM_SEED": str(seed),
        "PYTHONHASHSEED": str(seed),
        "PYTHONPATH": os.pathsep.join([str(folder), *[str(p) for p in base_pythonpath if str(p)]]),
    }
