"""`rtlreward cvdp ...` speaks like every other command: -x for executors (conformance too), -o for outputs, the
same open-source default in `list` and `eval`, the project config's profile, and progress while conformance runs."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def app():
    import cvdp_adapter.harness_plugin as harness_plugin
    import cvdp_adapter.plugin as plugin
    from rtlreward.plugins import make_plugin_manager

    app = typer.Typer()
    make_plugin_manager(
        extra_plugins={"cvdp": plugin, "cvdp_harness": harness_plugin}, load_entrypoints=False
    ).register_commands(app)
    return app


def invoke(app, *args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "RTLREWARD_CONFIG": ""})


def test_list_and_eval_share_the_open_source_default(app):
    """`cvdp list` used to list commercial-only records as selectable unless asked; `cvdp eval` skipped them by
    default. Both now skip them by default and take --include-commercial."""
    default = invoke(app, "cvdp", "list")
    assert default.exit_code == 0 and "excluded (need Cadence Xcelium)" in default.stdout
    everything = invoke(app, "cvdp", "list", "--include-commercial")
    assert everything.exit_code == 0 and "excluded" not in everything.stdout.splitlines()[-1]
    for cmd in ("list", "eval"):
        assert "--include-commercial" in invoke(app, "cvdp", cmd, "--help").stdout, cmd


def test_conformance_takes_x_for_executors_and_o_for_output(app):
    text = invoke(app, "cvdp", "conformance", "--help").stdout
    assert "-x" in text and "--executor" in text and "-o" in text
    assert " -e " not in text


def test_eval_takes_the_common_options(app):
    text = invoke(app, "cvdp", "eval", "--help").stdout
    for opt in ("--rescore", "--keep-replies", "--fail-under", "--out-dir", "-x", "-p", "-j", "-o"):
        assert opt in text, opt


def test_conformance_progress_without_a_terminal(capsys):
    """Piped (CI logs), the long check prints its count and a line every tenth instead of staying silent."""
    from cvdp_adapter.cli import _progress
    from rtlreward.config import set_verbosity

    set_verbosity(0)
    with _progress("[local] recorded candidates") as (started, advance):
        started(20)
        for i in range(20):
            advance(i)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "[local] recorded candidates: 20 to run"
    assert "[local] recorded candidates: 2/20" in err and err[-1] == "[local] recorded candidates: 20/20"
    set_verbosity(-1)
    with _progress("quiet") as (started, advance):
        started(3)
        advance(0)
    assert capsys.readouterr().err == ""
    set_verbosity(0)
