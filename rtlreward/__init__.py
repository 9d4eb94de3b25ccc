"""rtlreward: reward and evaluator framework for training LLMs on hardware design."""

from rtlreward.model import Candidate, Diagnostic, Harness, Interface, Port, Reward, StageResult, Status, Task
from rtlreward.plugins import hookimpl
from rtlreward.stage import Stage, StageContext
from rtlreward.version import __version__

__all__ = [
    "Candidate",
    "Diagnostic",
    "Harness",
    "Interface",
    "Port",
    "Reward",
    "Stage",
    "StageContext",
    "StageResult",
    "Status",
    "Task",
    "__version__",
    "hookimpl",
]
