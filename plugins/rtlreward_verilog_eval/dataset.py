"""VerilogEval v2 spec-to-rtl (NVlabs/verilog-eval, MIT) as rtlreward Tasks.

Each problem folder holds `ProbNNN_name_prompt.txt` (the spec), `_ref.sv` (module `RefModule`) and `_test.sv`
(module `tb`, which instantiates `RefModule` and the answer's `TopModule` and counts mismatching samples). The
answer is one file declaring `TopModule`. The reference is stored renamed to `TopModule` so it can be scored as
an answer and so the interface stage reads the expected ports from it; the harness keeps the original files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rtlreward.model import Harness, Task
from rtlreward_hdl.data import default_source

__all__ = [
    "DATASET",
    "KNOWN_REFERENCE_FAILURES",
    "SYSTEM_PROMPT",
    "VerilogEvalDataset",
    "find_problems_dir",
    "official_prompt",
]

DATASET = "verilog-eval"
ENV_VAR = "RTLREWARD_VERILOG_EVAL"
SUBDIR = "dataset_spec-to-rtl"
TOPLEVEL = "TopModule"
ANSWER_FILE = "TopModule.sv"
SIM_TIMEOUT = 30.0  # the official Makefile: `timeout 30 ./sampleNN`

# The benchmark's own wording (scripts/sv-generate, task spec-to-rtl, no explanation, no rules, no examples).
SYSTEM_PROMPT = "You are a Verilog RTL designer that only writes code using correct Verilog syntax."
_NO_EXPLAIN = "Enclose your code with [BEGIN] and [DONE]. Only output the code snippet\nand do NOT output anything else."

# Problems whose own reference does not pass here (Debian Icarus 11), and why. Measured by running every
# reference through this plugin's runner (tests/test_verilog_eval_references.py keeps this list honest).
KNOWN_REFERENCE_FAILURES: dict[str, str] = {
    "Prob082_lfsr32": "the stimulus runs 200000 clocks, past the testbench's own #1000000 ps guard, so the "
    "testbench prints TIMEOUT; the official analyzer scores that a failure with any simulator",
    "Prob141_count_clock": "the stimulus runs 200000 clocks, past the testbench's own #1000000 ps guard, so the "
    "testbench prints TIMEOUT; the official analyzer scores that a failure with any simulator",
    "Prob099_m2014_q6c": "broken upstream at this commit: the reference declares outputs Y1/Y3, the testbench "
    "connects Y2/Y4 (and the prompt is garbled)",
    "Prob151_review2015_fsm": "Icarus 11: 'sorry: This cast operation is not yet supported' (Icarus 12 compiles "
    "it)",
    "Prob156_review2015_fancytimer": "Icarus 11: 'sorry: This cast operation is not yet supported' (Icarus 12 "
    "compiles it)",
}

_PROB_RE = re.compile(r"^(Prob\d+_\w+?)_prompt\.txt$")
_FILTERS = ("ids", "id", "limit", "prompt_style", "skip_known_issues")


def official_prompt(spec: str) -> str:
    """The user message VerilogEval's sv-generate sends for spec-to-rtl."""
    return f"Question:\n{spec.strip()}\n\n{_NO_EXPLAIN}\n\nAnswer:\n"


def _looks_like_problems(d: Path) -> bool:
    return d.is_dir() and any(d.glob("Prob*_prompt.txt")) and any(d.glob("Prob*_test.sv"))


def find_problems_dir(source: str | Path) -> Path | None:
    """The spec-to-rtl problem folder inside `source`: the folder itself, `<source>/dataset_spec-to-rtl`
    (a clone of the benchmark or rtlreward's data copy), or None."""
    p = Path(source)
    if _looks_like_problems(p / SUBDIR):
        return p / SUBDIR
    if _looks_like_problems(p) and not any(p.glob("Prob*_ifc.txt")):  # *_ifc.txt: the code-completion variant
        return p
    return None


def _ids(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [x.strip() for x in value.split(",") if x.strip()]
    return [str(x) for x in value]


def _select(names: list[str], wanted: Iterable[str]) -> list[str]:
    """Problem names for the requested ids: the full name (`Prob001_zero`), the number (`Prob001`, `1`) or the
    short name (`zero`)."""
    out: list[str] = []
    missing: list[str] = []
    for w in wanted:
        hits = [n for n in names if n == w]
        if not hits:
            num = w[4:] if w.lower().startswith("prob") else w
            if num.isdigit():
                hits = [n for n in names if int(n[4:7]) == int(num)]
            else:
                hits = [n for n in names if n.split("_", 1)[1] == w]
        if not hits:
            missing.append(w)
        out += [h for h in hits if h not in out]
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise ValueError(
            f"verilog-eval has no problem {shown}; use names like Prob001_zero, Prob001 or 1 (the ProbNNN_*_prompt.txt "
            "files of the data folder)"
        )
    return out


class VerilogEvalDataset:
    """`load(source=None, ids=None, limit=None, prompt_style="official", skip_known_issues=False)`.

    `source`: the benchmark data (a folder holding `dataset_spec-to-rtl/`, or that folder). Default:
    `$RTLREWARD_VERILOG_EVAL`, else `../shared/data/verilog-eval` beside the project or the working directory.
    `prompt_style`: "official" (the benchmark's Question/[BEGIN]..[DONE]/Answer wording and system message) or
    "spec" (the problem text alone, no system message). `skip_known_issues`: leave out the problems whose own
    reference fails here (KNOWN_REFERENCE_FAILURES), e.g. for training.
    """

    name = DATASET
    description = "VerilogEval v2 spec-to-rtl: 156 problems, Icarus testbench counting mismatched samples"

    def detect(self, source: str | Path) -> bool:
        try:
            return find_problems_dir(source) is not None
        except OSError:
            return False

    def resolve(self, source: str | Path | None) -> Path:
        if source is None:
            found, looked = default_source(DATASET, ENV_VAR)
            if found is None:
                places = ", ".join(str(p) for p in looked)
                raise ValueError(
                    f"VerilogEval data not found (looked in {places}). Get it from github.com/NVlabs/verilog-eval "
                    f"(MIT) and pass the clone with --source PATH, or set {ENV_VAR}=PATH"
                )
            source = found
        d = find_problems_dir(source)
        if d is None:
            raise ValueError(
                f"{source} holds no VerilogEval spec-to-rtl problems (expected {SUBDIR}/ProbNNN_*_prompt.txt, "
                "_ref.sv and _test.sv); point --source at a clone of NVlabs/verilog-eval"
            )
        return d

    def load(self, source: str | Path | None = None, **filters: Any) -> list[Task]:
        unknown = sorted(set(filters) - set(_FILTERS))
        if unknown:
            raise ValueError(
                f"verilog-eval: unknown filter(s) {', '.join(unknown)}; known: {', '.join(_FILTERS)}"
            )
        style = filters.get("prompt_style") or "official"
        if style not in ("official", "spec"):
            raise ValueError(f"verilog-eval: prompt_style must be 'official' or 'spec', not {style!r}")
        d = self.resolve(source)
        names = sorted(m.group(1) for p in d.iterdir() if (m := _PROB_RE.match(p.name)))
        wanted = _ids(filters.get("ids")) or _ids(filters.get("id"))
        if wanted:
            names = _select(names, wanted)
        if filters.get("skip_known_issues"):
            names = [n for n in names if n not in KNOWN_REFERENCE_FAILURES]
        limit = filters.get("limit")
        if limit is not None:
            names = names[: max(0, int(limit))]
        tasks = []
        for name in names:
            ref_p, tb_p = d / f"{name}_ref.sv", d / f"{name}_test.sv"
            if not (ref_p.is_file() and tb_p.is_file()):
                continue
            tasks.append(
                self.task(
                    name,
                    (d / f"{name}_prompt.txt").read_text(),
                    ref_p.read_text(),
                    tb_p.read_text(),
                    style=style,
                    source=d,
                )
            )
        return tasks

    def task(
        self, name: str, spec: str, ref: str, tb: str, *, style: str = "official", source: Path | None = None
    ) -> Task:
        ref_name, tb_name = f"{name}_ref.sv", f"{name}_test.sv"
        metadata: dict[str, Any] = {"spec": spec, "benchmark": "VerilogEval v2 spec-to-rtl"}
        if source is not None:
            metadata["source"] = str(source)
        if name in KNOWN_REFERENCE_FAILURES:
            metadata["known_issue"] = KNOWN_REFERENCE_FAILURES[name]
        return Task(
            id=name,
            prompt=official_prompt(spec) if style == "official" else spec.strip() + "\n",
            system_prompt=SYSTEM_PROMPT if style == "official" else "",
            expected_files=(ANSWER_FILE,),
            toplevel=TOPLEVEL,
            reference={ANSWER_FILE: re.sub(r"\bRefModule\b", TOPLEVEL, ref)},
            harness=Harness(
                kind=DATASET,
                files={tb_name: tb, ref_name: ref},
                options={
                    "problem": name,
                    "testbench": [tb_name, ref_name],
                    "tb_top": "tb",
                    "timeout": SIM_TIMEOUT,
                },
            ),
            dataset=DATASET,
            category="spec-to-rtl",
            metadata=metadata,
        )
