"""Every command a page shows is run: each `rtlreward ...` line of the ```bash (and untagged) code blocks of
docs/**/*.md and README.md runs as a real subprocess and must exit 0 without a traceback (`score` of a reply
shown failing: 1, with its FAIL verdict printed).

How, so that it is faithful, bounded in time and leaves the checkout alone:

- **A sandbox per page**: a temporary folder whose entries are symlinks to the project root's (so `examples/...`
  and `cvdp_adapter/...` resolve as from the root) with `../shared` beside it; outputs land in the sandbox. A
  page's commands run in order in one sandbox, so `sample` feeds `eval` feeds `report` as on the page.
- **One result cache** for the whole session (`RTLREWARD_CACHE_DIR`, a temporary folder): a reply scored by two
  pages is computed once.
- **FIXTURES**: inputs a page names but does not make (`--completions replies.jsonl`, a results file, a training
  run) are written into the sandbox when a command first names them: references (or empty replies for CVDP,
  whose harness is the slow part) of the first tasks of every dataset the pages use.
- **PLACEHOLDERS**: the few words that stand for "your file" on a page, with what they stand for here; an
  option shown in brackets (`[--executor docker]`) is optional and left out.
- **BOUNDARY**: commands that need what this machine lacks run in the form that reaches that boundary; each
  entry says why. **BOUNDED**: commands over a whole dataset are cut to a few tasks (the machine is shared).

`test_inventory` counts the commands and how each ran; adapt a rule here when a page grows a command it does
not cover (the inventory test fails on an unclassified one).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
VENDORED = (
    "cvdp_adapter/data/cvdp_v1.1.0_example_nonagentic_code_generation_no_commercial_with_solutions.jsonl"
)
CVDP_OPEN = "../shared/data/cvdp/cvdp_open_codegen.dedup.jsonl"
PAGES = [*sorted(p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts), ROOT / "README.md"]
ROOT_OPTIONS = {
    "-q",
    "--quiet",
    "-v",
    "-vv",
    "--verbose",
}  # options of `rtlreward` itself, before the command
PLUGIN_PAGE = "docs/writing-a-plugin.md"  # its commands need the page's example plugin installed
TIMEOUT = 420  # seconds per command: the slowest is a CVDP harness run of both vendored references

pytestmark = pytest.mark.slow

# -- what the pages say ------------------------------------------------------------------------------------------
_FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
SHELL_LANGS = {"bash", "sh", "shell", "console", ""}


@dataclass(frozen=True)
class DocCommand:
    page: str  # relative to the project root
    line: int
    argv: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}:{' '.join(self.argv[1:3])}"


def _logical_lines(body: str) -> list[tuple[int, list[str]]]:
    """(line offset, shell words) per command of a block: backslash continuations joined, comments dropped,
    a quote left open carried into the next lines (a `python3 -c '...'` over several lines)."""
    lines = body.splitlines()
    out: list[tuple[int, list[str]]] = []
    i = 0
    while i < len(lines):
        start, text = i, lines[i]
        i += 1
        while True:
            if text.rstrip().endswith("\\") and i < len(lines):
                text = text.rstrip()[:-1] + " " + lines[i].strip()
                i += 1
                continue
            try:
                words = shlex.split(text, comments=True)
            except ValueError:  # an open quote: the command goes on
                if i < len(lines):
                    text += "\n" + lines[i]
                    i += 1
                    continue
                words = []
            break
        out.append((start, words))
    return out


def doc_commands(pages: list[Path] = PAGES) -> list[DocCommand]:
    """Every `rtlreward ...` command of the pages, in page order (`a && b` is two commands)."""
    found = []
    for page in pages:
        text = page.read_text()
        for m in _FENCE.finditer(text):
            if m["lang"] not in SHELL_LANGS:
                continue
            first = text[: m.start("body")].count("\n") + 1
            for offset, words in _logical_lines(m["body"]):
                if words and words[-1] == "&":
                    words = words[:-1]
                parts: list[list[str]] = [[]]
                for w in words:
                    if w in ("&&", ";"):
                        parts.append([])
                    else:
                        parts[-1].append(w)
                for argv in parts:
                    if argv and argv[0] == "rtlreward":
                        found.append(DocCommand(str(page.relative_to(ROOT)), first + offset, tuple(argv)))
    return found


COMMANDS = doc_commands()

# -- how each runs here ------------------------------------------------------------------------------------------
PLACEHOLDERS = {  # (page, word) -> what the word stands for here
    ("README.md", "DATASET.jsonl"): VENDORED,
    ("README.md", "reply.txt"): "examples/fixed_priority_arbiter/completions/correct.txt",
    ("docs/rtllm.md", "path/to/RTLLM"): "../shared/data/rtllm",
    ("docs/verilog-eval.md", "PATH"): "../shared/data/verilog-eval",
    ("docs/trainers/http-server.md", "my_tasks/"): "examples",
    # a cluster's head: Ray's "local" starts a new single-machine Ray, so the command runs the real ray executor
    ("docs/ray.md", "HEAD:6379"): "local",
}

BOUNDARY = {
    "train": "needs TINKER_API_KEY and the Tinker service: run with --dry-run (the resolved configuration)",
    "sandbox build-image": "needs root, debootstrap and a Docker engine, and takes minutes: run with --help",
    "serve": "serves until stopped: started on a free port, must answer GET /health, then stopped",
    "sample --base-url": "needs a model server: the stand-in OpenAI-compatible server (tests/openai_stub.py) "
    "answers instead, with the VerilogEval references",
}
BOUNDED = {
    "eval": "a whole dataset: --filter limit=2 unless the page already picks tasks",
    "tasks check": "references x seeds + mutants of a whole dataset: --limit 1 --seeds 1 --mutants 2",
    "sample": "a whole dataset: --limit 2 unless the page already limits it",
}
FIXTURES = {
    "replies.jsonl": "completions",
    "out.jsonl": "completions",
    "completions.jsonl": "completions",
    "examples.jsonl": "completions",
    "before.results.jsonl": "results-before",
    "after.results.jsonl": "results-after",
    "runs/rl": "training-run",
    "corpus.jsonl": "corpus",
}


@dataclass
class Plan:
    argv: list[str]
    how: list[str] = field(default_factory=list)  # the rules applied (empty: as shown)
    serve_port: int | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _has_selection(argv: list[str]) -> bool:
    return any(re.match(r"(ids?|limit)=", a) for a in argv) or "--limit" in argv


def plan(cmd: DocCommand, stub_url: str = "http://stub") -> Plan:
    """The command line as it runs here, and the rules that shaped it."""
    argv, optional = [], False
    for w in cmd.argv:  # an option shown in brackets (`[--executor docker]`) is optional: left out
        optional = optional or w.startswith("[-")
        if not optional:
            argv.append(PLACEHOLDERS.get((cmd.page, w), w))
        optional = optional and not w.endswith("]")
    p = Plan(argv)
    if argv != list(cmd.argv):
        p.how.append("placeholder")
    sub = [w for w in argv[1:] if w not in ROOT_OPTIONS][:2]  # `rtlreward -q eval ...` is an eval
    if sub[:1] == ["train"] and "--dry-run" not in argv:
        argv.append("--dry-run")
        p.how.append("boundary:train")
    elif sub == ["sandbox", "build-image"]:
        del argv[3:]
        argv.append("--help")
        p.how.append("boundary:sandbox build-image")
    elif sub[:1] == ["serve"]:
        p.serve_port = _free_port()
        if "--port" in argv:
            argv[argv.index("--port") + 1] = str(p.serve_port)
        else:
            argv += ["--port", str(p.serve_port)]
        p.how.append("boundary:serve")
    elif sub[:1] == ["sample"]:
        url_at = argv.index("--base-url") + 1 if "--base-url" in argv else 0
        if url_at and argv[url_at].startswith("http://localhost:8000") and "--dry-run" not in argv:
            argv[url_at] = stub_url
            p.how.append("boundary:sample --base-url")
        if not _has_selection(argv) and "--dry-run" not in argv:
            argv += ["--limit", "2"]
            p.how.append("bounded:sample")
    elif sub[:1] == ["eval"] and not _has_selection(argv):
        argv += ["--filter", "limit=2"]
        p.how.append("bounded:eval")
    elif sub == ["tasks", "check"]:
        argv += ["--limit", "1", "--seeds", "1", "--mutants", "2"]
        p.how.append("bounded:tasks check")
    return p


# -- fixtures ------------------------------------------------------------------------------------------------------
def _completions_fixture() -> str:
    """References of the first two tasks of every dataset the pages score (empty replies for CVDP: its harness
    is slow and `cvdp eval --reference` runs the references anyway), as completions lines."""
    from rtlreward.integration import load_tasks

    lines = []
    selections = [
        ("verilog-eval", {}, True),
        ("rtllm", {}, True),
        ("rtllm", {"category": "Arithmetic"}, True),  # rtllm.md picks a category
        (str(ROOT / "examples"), {}, True),
        ("cvdp", {"interface": False}, False),
        (str(ROOT.parent / CVDP_OPEN.removeprefix("../")), {"category": "cid003", "interface": False}, False),
    ]
    for dataset, filters, reference in selections:
        if dataset.startswith(str(SHARED)) and not SHARED.exists():
            continue
        for task in load_tasks(dataset, **filters)[:2]:
            if reference and task.reference:
                lines.append({"id": task.id, "files": dict(task.reference)})
            else:
                lines.append({"id": task.id, "completion": ""})
    return "".join(json.dumps(x) + "\n" for x in lines)


def _results(passed_second: bool) -> str:
    def row(tid: str, passed: bool) -> dict:
        status = "passed" if passed else "failed"
        return {
            "id": tid,
            "sample": 0,
            "reward": 1.6 if passed else 0.6,
            "passed": passed,
            "stages": {
                "format": {"score": 1.0, "status": "passed"},
                "compile": {"score": 1.0, "status": "passed"},
                "tests": {"score": 1.0 if passed else 0.0, "status": status},
            },
            "max_total": 1.6,
            "profile": "shaped",
            "category": "spec-to-rtl",
        }

    rows = [row("Prob001_zero", True), row("Prob002_m2014_q4i", passed_second)]
    return "".join(json.dumps(r) + "\n" for r in rows)


def _training_run() -> str:
    rows = [
        {
            "progress/batch": i,
            "env/all/reward/total": 0.4 + 0.2 * i,
            "env/all/format_valid": 0.8,
            "env/all/syntax_valid": 0.5 + 0.1 * i,
            "env/all/passed": 0.1 * i,
            "optim/lr": 1e-4,
            "time/total": 30.0 + i,
        }
        for i in range(3)
    ]
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture(scope="module")
def fixture_texts() -> dict[str, str]:
    return {
        "completions": _completions_fixture(),
        "results-before": _results(False),
        "results-after": _results(True),
        "training-run": _training_run(),
        "corpus": _corpus_fixture(),
    }


def _corpus_fixture() -> str:
    """A small reference-carrying corpus (tests/corpus_gen.py) for docs/corpora.md."""
    from corpus_gen import problems

    return "".join(json.dumps(r) + "\n" for r in problems(12, seed=1))


def write_fixtures(argv: list[str], box: Path, texts: dict[str, str]) -> None:
    for word in argv:
        kind = FIXTURES.get(word)
        target = box / word
        if kind is None or target.exists():
            continue
        if kind == "training-run":
            target.mkdir(parents=True)
            (target / "metrics.jsonl").write_text(texts[kind])
        else:
            target.write_text(texts[kind])


# -- the sandbox and the stand-in model server --------------------------------------------------------------------
def make_sandbox(tmp: Path) -> Path:
    box = tmp / "project"
    box.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "site"):
            (box / entry.name).symlink_to(entry)
    if SHARED.exists():
        (tmp / "shared").symlink_to(SHARED)
    return box


def _linebudget_path(tmp: Path) -> Path:
    """The docs' example plugin package importable from PYTHONPATH with an entry point (a dist-info folder
    beside it): what `pip install ./rtlreward-linebudget` gives, without touching the environment."""
    import plugin_helpers as ph

    pkg = ph.write_package(tmp / "rtlreward-linebudget")
    meta = tomllib.loads((pkg / "pyproject.toml").read_text())["project"]
    info = pkg / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n"
    )
    eps = "".join(f"{k} = {v}\n" for k, v in meta["entry-points"]["rtlreward"].items())
    (info / "entry_points.txt").write_text(f"[rtlreward]\n{eps}")
    return pkg


@pytest.fixture(scope="module")
def stub():
    from openai_stub import StubOpenAI, last_user

    from rtlreward.integration import load_tasks

    replies = {
        t.prompt: f"[BEGIN]\n{t.reference['TopModule.sv']}\n[DONE]\n" for t in load_tasks("verilog-eval")
    }
    with StubOpenAI(lambda m: replies.get(last_user(m), "I cannot help with that."), model=None) as s:
        yield s


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory):
    """One sandbox (and environment) per page, made on first use."""
    made: dict[str, tuple[Path, dict[str, str]]] = {}
    cache = os.environ.get("RTLREWARD_CACHE_DIR") or str(tmp_path_factory.mktemp("cache"))

    def get(page: str) -> tuple[Path, dict[str, str]]:
        if page not in made:
            tmp = tmp_path_factory.mktemp(re.sub(r"\W+", "-", page))
            box = make_sandbox(tmp)
            env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
            env.update(RTLREWARD_CACHE_DIR=cache, TINKER_API_KEY="", COLUMNS="140")
            if page == PLUGIN_PAGE:
                pkg = _linebudget_path(tmp)
                shutil.copy(pkg / "linebudget.toml", box / "linebudget.toml")
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pkg), env.get("PYTHONPATH")]))
            made[page] = (box, env)
        return made[page]

    return get


def _serve(argv: list[str], port: int, box: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Start a server command, wait for GET /health to answer 200, stop it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", *argv],
        cwd=box,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    healthy = False
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
                    healthy = resp.status == 200
                    break
            except OSError:
                time.sleep(0.5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return subprocess.CompletedProcess(
        argv, 0 if healthy else 1, out, err + ("" if healthy else "\nno /health")
    )


_ran: dict[tuple, subprocess.CompletedProcess] = {}  # a command line shown on several pages runs once


def _writes(argv: list[str]) -> bool:
    return any(a in ("--out", "-o", "--summary-json") for a in argv) or bool(
        {"eval", "sample"} & set(argv[1:3])
    )


def _expected_exit(argv: list[str], res: subprocess.CompletedProcess) -> int:
    """0, except `rtlreward score` of a reply a page shows failing on purpose: a FAIL verdict exits 1
    (docs/schema.md), and the output must say FAIL (the table's verdict, or `"passed": false` in the JSON)."""
    sub = [w for w in argv[1:] if w not in ROOT_OPTIONS][:1]
    if sub == ["score"] and res.returncode == 1:
        if "--json" in argv:
            try:
                return 1 if json.loads(res.stdout).get("passed") is False else 0
            except ValueError:
                return 0
        return 1 if "verdict FAIL" in res.stdout else 0
    return 0


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.id for c in COMMANDS])
def test_doc_command_runs(cmd, sandboxes, stub, fixture_texts):
    if ("../shared" in " ".join(cmd.argv)) and not SHARED.exists():
        pytest.skip("../shared is not beside the project")
    box, env = sandboxes(cmd.page)
    p = plan(cmd, stub.base_url)
    write_fixtures(p.argv, box, fixture_texts)
    key = (tuple(p.argv), env.get("PYTHONPATH"))
    if key in _ran:
        res = _ran[key]
    elif p.serve_port is not None:
        res = _serve(p.argv, p.serve_port, box, env)
    else:
        res = subprocess.run(
            [sys.executable, "-m", *p.argv], cwd=box, env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
    if p.serve_port is None and not _writes(p.argv):
        _ran[key] = res
    shown = " ".join(cmd.argv)
    ran = " ".join(p.argv)
    assert res.returncode == _expected_exit(p.argv, res), (
        f"{shown}\n(ran: {ran})\nstdout:\n{res.stdout[-3000:]}\nstderr:\n{res.stderr[-3000:]}"
    )
    assert "Traceback" not in res.stderr, res.stderr[-3000:]


def test_inventory():
    """Counts (printed with -s or on failure) and sanity: every rule is used, and few commands need one."""
    plans = [(c, plan(c)) for c in COMMANDS]
    as_shown = [c for c, p in plans if not p.how]
    rules: dict[str, int] = {}
    for _c, p in plans:
        for rule in p.how:
            rules[rule] = rules.get(rule, 0) + 1
    distinct = {
        (tuple(a for a in p.argv if p.serve_port is None or a != str(p.serve_port)), c.page == PLUGIN_PAGE)
        for c, p in plans
    }
    print(
        f"\n{len(COMMANDS)} rtlreward commands on {len({c.page for c in COMMANDS})} pages "
        f"({len(distinct)} distinct command lines); {len(as_shown)} run as shown; adapted: {rules}"
    )

    assert len(COMMANDS) >= 60
    boundary = sum(n for r, n in rules.items() if r.startswith("boundary:"))
    # a page full of commands nobody can run here is a page to rewrite: at most one in six (and 15 at least)
    assert boundary <= max(15, len(COMMANDS) // 6), rules
    used = {r.split(":", 1)[1] for r in rules if ":" in r}
    assert set(BOUNDARY) <= used | {"train"}, set(BOUNDARY) - used
    assert set(BOUNDED) <= used, set(BOUNDED) - used
    for page, word in PLACEHOLDERS:
        assert any(c.page == page and word in c.argv for c in COMMANDS), f"stale placeholder {word} on {page}"
