"""CVDP record -> rtlreward Task.

What the engine needs from a record, and where it comes from:
- `expected_files`: the answer's paths (non-agentic `output.context` keys, agentic `patch` keys);
- `toplevel`, `compile_sources`: the first harness service's env (`TOPLEVEL`, `VERILOG_SOURCES` with the
  container prefix `/code/` dropped, so `/code/rtl/x.sv` is the workspace's `rtl/x.sv`);
- `context`: the files in the workspace before the answer (non-agentic `input.context`, agentic `context`);
- `harness`: `Harness(kind="cvdp", files=<harness files verbatim>, options={"category", "agentic"})`, run by the
  cvdp harness runner exactly as the benchmark would;
- `reference`: the record's own answer when the release has one;
- `interface`: the shared HDL library's guess (`rtlreward_hdl.interface`: the reference, the spec, the harness).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cvdp_adapter import records as R
from cvdp_adapter.prompts import build_messages
from rtlreward.model import Harness, Task

CONTAINER_ROOT = "/code/"


def workspace_path(container_path: str) -> str:
    """`/code/rtl/x.sv` -> `rtl/x.sv` (the benchmark mounts the workspace at /code)."""
    p = container_path.strip()
    if p.startswith(CONTAINER_ROOT):
        return p[len(CONTAINER_ROOT) :]
    return p.lstrip("/")


def compile_sources(env: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(workspace_path(s) for s in env.get("VERILOG_SOURCES", "").split() if s))


def task_metadata(rec: R.Record) -> dict[str, Any]:
    """Facts a listing, a runner or a report wants without re-parsing the harness."""
    h = rec.harness
    services = R.parse_compose(h.get("docker-compose.yml", ""))
    envs = R.env_files(h)
    return {
        "request": rec.prompt,
        "system_message": rec.system_message,
        "agentic": rec.agentic,
        "cocotb": R.cocotb_generation(h),  # "cocotb2" (cocotb_tools.runner) | "cocotb1" (cocotb.runner) | ""
        "cocotb_runner": {"cocotb2": "cocotb_tools.runner", "cocotb1": "cocotb.runner"}.get(
            R.cocotb_generation(h), ""
        ),
        "images": R.images(h),
        "simulators": R.simulators(h),
        "services": list(services),
        "toplevels": [e.get("TOPLEVEL", "") for _, e in envs if e.get("TOPLEVEL")],
        "commercial": R.commercial_reasons(rec),
        "has_reference": rec.has_reference(),
        "source": rec.source,
        "line": rec.line,
    }


def _interface(task: Task) -> Any:
    """The shared HDL library's guess of the expected interface, or None when it cannot tell."""
    from rtlreward_hdl.interface import expected_interface

    try:
        return expected_interface(task)
    except Exception:  # an interface guess must never stop a dataset from loading
        return None


def record_to_task(
    rec: R.Record | Mapping[str, Any], *, style: str = "auto", interface: bool = True, dataset: str = "cvdp"
) -> Task:
    """One record as a Task. `style` picks the prompt (see `cvdp_adapter.prompts`); `interface=False` skips the
    interface guess (listing thousands of records)."""
    if not isinstance(rec, R.Record):
        rec = R.parse_record(rec)
    env = R.main_env(rec.harness)
    messages = build_messages(rec, style=style)
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    try:
        reference = rec.reference()
    except R.PatchError:
        reference = None  # a reference we cannot reproduce is no reference; `cvdp show` reports the error
    task = Task(
        id=rec.id,
        prompt=user,
        system_prompt=system,
        expected_files=rec.expected_files,
        toplevel=env.get("TOPLEVEL") or None,
        context=rec.context,
        compile_sources=compile_sources(env),
        harness=Harness(
            kind="cvdp", files=rec.harness, options={"category": rec.category, "agentic": rec.agentic}
        ),
        reference=reference,
        dataset=dataset,
        category=rec.category,
        difficulty=rec.difficulty,
        metadata={**task_metadata(rec), "prompt_style": style},
    )
    if interface:
        iface = _interface(task)
        if iface is not None:
            import attrs

            task = attrs.evolve(task, interface=iface)
    return task


# ---------------------------------------------------------------------------------------------------------------
# The dataset plugin object
# ---------------------------------------------------------------------------------------------------------------

FILTERS = (
    "category",
    "difficulty",
    "id",
    "open_source_only",
    "with_reference",
    "style",
    "interface",
    "limit",
)


def default_source() -> str:
    """The vendored official v1.1.0 examples (two problems with reference solutions)."""
    from pathlib import Path

    return str(Path(__file__).with_name("data"))


class CvdpDataset:
    """`register("cvdp", CvdpDataset())`: CVDP JSONL files (either shape, or a folder of them) as Tasks."""

    name = "cvdp"
    description = "NVIDIA CVDP (agentic and non-agentic JSONL); default: the two vendored v1.1.0 examples"

    def detect(self, source: Any) -> bool:
        return R.looks_like_cvdp(source)

    def records(self, source: str | None = None) -> list[R.Record]:
        return R.read_records(source or default_source())

    def select(self, source: str | None = None, **filters: Any) -> R.Selection:
        """Records kept and records excluded (with the reason) by the filters."""
        return R.select(
            self.records(source),
            category=filters.get("category"),
            difficulty=filters.get("difficulty"),
            id=filters.get("id"),
            open_source_only=bool(filters.get("open_source_only", True)),
            with_reference=bool(filters.get("with_reference", False)),
        )

    def load(self, source: str | None = None, **filters: Any) -> list[Task]:
        """Tasks of a CVDP file. Filters: `category` (cid003 or 3, comma list), `difficulty`, `id` (glob,
        `re:regex`, or substring), `open_source_only` (default True: records that need Cadence Xcelium can never
        pass here), `with_reference` (only records whose release has the solution), `style` (prompt style:
        auto|copilot|agentic), `interface` (guess the expected interface; default True), `limit`."""
        unknown = sorted(set(filters) - set(FILTERS))
        if unknown:
            raise ValueError(
                f"unknown cvdp filter(s) {unknown}; the cvdp dataset accepts {', '.join(FILTERS)}"
            )
        sel = self.select(source, **filters)
        kept = list(sel.kept)
        if filters.get("limit"):
            kept = kept[: int(filters["limit"])]
        style = filters.get("style") or "auto"
        return [record_to_task(r, style=style, interface=filters.get("interface", True)) for r in kept]

    def messages(self, task: Task, style: str = "auto") -> list[dict[str, str]]:
        """The chat for one of this dataset's tasks in a prompt style (`auto`, `copilot`, `agentic`), rebuilt
        from the task's own fields (context included). Trainers ask the dataset for it (an agentic episode
        over a copilot record, a prompt cut to fit) instead of rebuilding CVDP's prompts themselves. `auto` is
        the style the task was loaded with."""
        if style == "auto":
            style = task.metadata.get("prompt_style") or "auto"
        return build_messages(task, style)


def load(source: str | None = None, **filters: Any) -> list[Task]:
    """`cvdp_adapter.load("file.jsonl", category="cid003")`: see `CvdpDataset.load`."""
    return CvdpDataset().load(source, **filters)
