"""The report's plots: matplotlib figures rendered to SVG and inlined in the page.

No pyplot: each plot is its own `Figure` on an SVG canvas, so nothing global is touched and nothing opens a
window. Text becomes glyph outlines (`svg.fonttype = path`) and mathtext is off (`text.parse_math = False`), so a
task id or category from a results file is drawn, never interpreted: a `$` cannot start mathtext and a `<` never
reaches the page as markup. Element ids are prefixed per figure, since several SVGs share one HTML document.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["PlotsUnavailable", "Plotter"]

PALETTE = ("#3b6ea8", "#d9822b", "#5a9e6f", "#b8474d", "#7d64a8", "#8c6d46")
LIGHT = "#c9d7e8"
RC = {
    "svg.fonttype": "path",
    "svg.hashsalt": "rtlreward-report",  # stable ids, so the same report renders the same bytes
    "text.parse_math": False,
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.grid": True,
    "grid.color": "#e4e4e4",
    "grid.linewidth": 0.6,
    "axes.axisbelow": True,
    "legend.frameon": False,
}


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _short(text: str, n: int = 32) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


class Plotter:
    """Makes the report's figures; `svg(...)` strings are ready to inline."""

    def __init__(self) -> None:
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise PlotsUnavailable(
                "plots need matplotlib: pip install 'rtlreward[report]' (the tables are in the page anyway)"
            ) from exc
        self._n = 0

    # -- plumbing -------------------------------------------------------------------------------------------------
    def _figure(self, w: float, h: float) -> Any:
        from matplotlib.backends.backend_svg import FigureCanvasSVG
        from matplotlib.figure import Figure

        fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
        FigureCanvasSVG(fig)
        return fig

    def _svg(self, fig: Any, alt: str) -> str:
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        text = buf.getvalue()
        text = text[text.index("<svg") :]
        text = re.sub(
            r"<metadata>.*?</metadata>\s*", "", text, flags=re.S
        )  # RDF boilerplate, nothing to show
        # matplotlib writes each text as a comment beside its glyphs (escaped: no `<`, `>` or `--` inside); the
        # page needs none of them, and a task id has no business in the markup, even commented out.
        text = re.sub(r"<!--.*?-->\s*", "", text, flags=re.S)
        low = text.lower()
        if (
            "<script" in low or "foreignobject" in low or "javascript:" in low
        ):  # never expected; never inlined
            raise ValueError("matplotlib produced active SVG content")
        self._n += 1
        p = f"f{self._n}-"
        text = re.sub(r'\bid="', f'id="{p}', text)
        text = re.sub(r'href="#', f'href="#{p}', text)
        text = re.sub(r"url\(#", f"url(#{p}", text)
        text = re.sub(r'<svg\b([^>]*?)\swidth="[^"]*"\s+height="[^"]*"', r"<svg\1", text, count=1)
        return text.replace("<svg", f'<svg class="plot" role="img" aria-label="{_attr(alt)}"', 1)

    def _run(self, fn: Any, *args: Any, **kwargs: Any) -> str:
        import matplotlib

        with matplotlib.rc_context(RC):
            return fn(*args, **kwargs)

    # -- plots ----------------------------------------------------------------------------------------------------
    def funnel(
        self, stages: Sequence[str], runs: Sequence[tuple[str, Sequence[int], Sequence[int], int]]
    ) -> str:
        """runs: (label, through each stage, passed each stage, samples)."""
        return self._run(self._funnel, stages, runs)

    def _funnel(
        self, stages: Sequence[str], runs: Sequence[tuple[str, Sequence[int], Sequence[int], int]]
    ) -> str:
        n = len(runs)
        fig = self._figure(5.0, 0.6 + 0.36 * len(stages) * max(1, n) + (0.25 * n + 0.3 if n > 1 else 0))
        ax = fig.add_subplot()
        h = 0.8 / n
        # Several runs are compared as shares of each run's replies: 10 of 12 and 50 of 60 are the same 83%.
        share = n > 1
        names = _legend_labels([run[0] for run in runs])
        for r, (_label, through, passed, total) in enumerate(runs):
            ys = [i + (r - (n - 1) / 2) * h for i in range(len(stages))]
            color = PALETTE[r % len(PALETTE)]
            scale = (100 / total if total else 0.0) if share else 1.0
            ax.barh(
                ys,
                [scale * v for v in passed],
                height=h * 0.9,
                color=LIGHT if n == 1 else color,
                alpha=1 if n == 1 else 0.3,
                label="passed this stage" if n == 1 else None,
            )
            ax.barh(
                ys,
                [scale * v for v in through],
                height=h * 0.55,
                color=color,
                label="passed it and every stage before" if n == 1 else f"{names[r]} ({total} replies)",
            )
            for y, v in zip(ys, through, strict=True):
                pct = f"{100 * v / total:.0f}%" if total else ""
                ax.text(scale * v, y, f" {pct} ({v})" if share else f" {v} {pct}", va="center", fontsize=8)
        ax.set_yticks(range(len(stages)), [_short(s) for s in stages])
        ax.invert_yaxis()
        if share:
            ax.set_xlabel("% of the run's replies")
            ax.set_xlim(0, 118)
            fig.legend(loc="outside upper left", fontsize=7, ncol=1)
        else:
            ax.set_xlabel("replies")
            ax.set_xlim(0, max([t for *_, t in runs] + [1]) * 1.12)
            ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, fontsize=7)
        ax.grid(axis="y", visible=False)
        return self._svg(fig, "per-stage funnel")

    def histogram(self, runs: Sequence[tuple[str, Sequence[float]]], top: float | None, xlabel: str) -> str:
        return self._run(self._histogram, runs, top, xlabel)

    def _histogram(self, runs: Sequence[tuple[str, Sequence[float]]], top: float | None, xlabel: str) -> str:
        share = len(runs) > 1  # runs of different sizes compare as shares, not counts
        fig = self._figure(5.6, 2.8 + (0.2 * len(runs) + 0.2 if share else 0))
        ax = fig.add_subplot()
        hi = max([top or 0.0] + [max(v) for _, v in runs if v] + [1e-9])
        lo = min([0.0] + [min(v) for _, v in runs if v])
        bins = 20
        names = _legend_labels([run[0] for run in runs])
        for r, (_label, values) in enumerate(runs):
            ax.hist(
                values,
                bins=bins,
                range=(lo, hi),
                weights=[100 / len(values)] * len(values) if share and values else None,
                color=PALETTE[r % len(PALETTE)],
                alpha=0.75 if len(runs) == 1 else 0.5,
                label=f"{names[r]} ({len(values)} replies)",
                edgecolor="white",
                linewidth=0.5,
            )
        ax.set_xlabel(xlabel)
        if share:
            ax.set_ylabel("% of the run's replies")
            fig.legend(loc="outside upper left", fontsize=7, ncol=1)
        else:
            ax.set_ylabel("replies")
            _integer_counts(ax)
        return self._svg(fig, f"histogram of {xlabel}")

    def stage_scores(self, stages: Sequence[str], runs: Sequence[tuple[str, dict[str, list[float]]]]) -> str:
        return self._run(self._stage_scores, stages, runs)

    def _stage_scores(self, stages: Sequence[str], runs: Sequence[tuple[str, dict[str, list[float]]]]) -> str:
        cols = min(3, max(1, len(stages)))
        rows = (len(stages) + cols - 1) // cols
        fig = self._figure(5.6, 1.6 * rows + 0.2)
        axes = fig.subplots(rows, cols, squeeze=False)
        for i, stage in enumerate(stages):
            ax = axes[i // cols][i % cols]
            for r, (_label, scores) in enumerate(runs):
                values = scores.get(stage, [])
                ax.hist(
                    values,
                    bins=10,
                    range=(0, 1),
                    # several runs: % of each run's replies that ran the stage, so sizes do not decide heights
                    weights=[100 / len(values)] * len(values) if len(runs) > 1 and values else None,
                    color=PALETTE[r % len(PALETTE)],
                    alpha=0.75 if len(runs) == 1 else 0.5,
                    edgecolor="white",
                    linewidth=0.5,
                )
            ax.set_title(_short(stage, 24) + (" (%)" if len(runs) > 1 else ""), fontsize=9)
            if len(runs) == 1:
                _integer_counts(ax)
            ax.tick_params(labelsize=7)
        for j in range(len(stages), rows * cols):
            axes[j // cols][j % cols].set_visible(False)
        return self._svg(fig, "stage score histograms")

    def bars(
        self, groups: Sequence[str], runs: Sequence[tuple[str, Sequence[float | None]]], xlabel: str
    ) -> str:
        return self._run(self._bars, groups, runs, xlabel)

    def _bars(
        self, groups: Sequence[str], runs: Sequence[tuple[str, Sequence[float | None]]], xlabel: str
    ) -> str:
        fig = self._figure(5.0, 0.7 + 0.3 * len(groups) * max(1, len(runs)))
        ax = fig.add_subplot()
        n = len(runs)
        h = 0.8 / n
        names = _legend_labels([run[0] for run in runs])
        for r, (_label, values) in enumerate(runs):
            ys = [i + (r - (n - 1) / 2) * h for i in range(len(groups))]
            vals = [100 * v if v is not None else 0.0 for v in values]
            ax.barh(ys, vals, height=h * 0.9, color=PALETTE[r % len(PALETTE)], label=names[r])
            for y, v in zip(ys, values, strict=True):
                ax.text(
                    100 * (v or 0),
                    y,
                    f" {100 * v:.0f}%" if v is not None else " n/a",
                    va="center",
                    fontsize=7,
                )
        ax.set_yticks(range(len(groups)), [_short(g) for g in groups])
        ax.invert_yaxis()
        ax.set_xlim(0, 112)
        ax.set_xlabel(xlabel)
        ax.grid(axis="y", visible=False)
        if n > 1:
            fig.legend(loc="outside upper left", fontsize=7, ncol=1)
        return self._svg(fig, xlabel)

    def lines(
        self, title: str, series: Sequence[tuple[str, Sequence[tuple[float, float]]]], ylabel: str = ""
    ) -> str:
        return self._run(self._lines, title, series, ylabel)

    def _lines(
        self, title: str, series: Sequence[tuple[str, Sequence[tuple[float, float]]]], ylabel: str
    ) -> str:
        fig = self._figure(7.2, 2.5)
        ax = fig.add_subplot()
        for r, (label, pts) in enumerate(series):
            xs = [x for x, _ in pts]
            ys = [y for _, y in pts]
            ax.plot(
                xs,
                ys,
                color=PALETTE[r % len(PALETTE)],
                linewidth=1.4,
                marker="o" if len(pts) < 30 else None,
                markersize=3,
                label=_short(label, 48),
            )
        ax.set_title(_short(title, 60), loc="left")
        ax.set_xlabel("step")
        if ylabel:
            ax.set_ylabel(ylabel)
        if len(series) > 1:
            ax.legend(fontsize=7, loc="best")
        return self._svg(fig, title)

    def scatter(self, points: Sequence[tuple[float, float]], xlabel: str, ylabel: str) -> str:
        return self._run(self._scatter, points, xlabel, ylabel)

    def _scatter(self, points: Sequence[tuple[float, float]], xlabel: str, ylabel: str) -> str:
        fig = self._figure(4.2, 4.0)
        ax = fig.add_subplot()
        ax.plot([0, 100], [0, 100], color="#999999", linewidth=0.8, linestyle="--")
        ax.scatter(
            [100 * x for x, _ in points], [100 * y for _, y in points], s=18, color=PALETTE[0], alpha=0.6
        )
        ax.set_xlim(-4, 104)
        ax.set_ylim(-4, 104)
        ax.set_xlabel(_short(xlabel, 40))
        ax.set_ylabel(_short(ylabel, 40))
        ax.set_aspect("equal")
        return self._svg(fig, "per-task pass rate, run against run")


def _legend_labels(labels: Sequence[str]) -> list[str]:
    """The runs' names for a legend: what they all end with (`.verilog-eval.shaped.jsonl`) dropped from its first
    separator on, so what tells them apart shows, then a long name cut in the middle (its start and end stay)."""
    texts = [" ".join(str(x).split()) for x in labels]
    if len(texts) > 1:
        n = 0  # characters every name ends with
        while n < min(len(t) for t in texts) and len({t[-n - 1] for t in texts}) == 1:
            n += 1
        common = texts[0][len(texts[0]) - n :]
        m = re.search(r"[.\-_]", common)
        k = len(common) - m.start() if m else 0
        if k and all(len(t) > k for t in texts):
            texts = [t[:-k] for t in texts]
    return [t if len(t) <= 52 else t[:24] + "…" + t[-27:] for t in texts]


def _integer_counts(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _attr(text: str) -> str:
    import html

    return html.escape(text, quote=True)
