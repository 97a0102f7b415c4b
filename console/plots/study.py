"""A tuning study's figures: optimisation history, parameter importances, chunk against objective, best vs default."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
import optuna
import plotly.graph_objects as go

from ...backends import MODES, format_tokens
from ...store import TrialRow
from ...tuner import MIN_TRIALS, Objective, clear_win, stored_interval, too_few_text
from .common import run_colour, styled
from .config_text import split_text, tokens_text
from .table import CELL_PX

PRUNED_COLOUR = "#9a9a9a"


def completed(trials: Sequence[TrialRow]) -> list[TrialRow]:
    """Trials that completed with an objective value (pruned trials' values are bounds, not results)."""
    return [t for t in trials if t.state == "COMPLETE" and t.objective is not None and np.isfinite(t.objective)]


def optuna_history(study: optuna.Study, label: str) -> go.Figure:
    """Optuna's optimisation history (objective by trial, best so far) in the house style."""
    fig = optuna.visualization.plot_optimization_history(study, target_name=label)
    return _history_axes(fig, label, len(study.trials) - 1)


def history_from_trials(trials: Sequence[TrialRow], objective: Objective, label: str) -> go.Figure:
    """The optimisation history built from the run store's trials (when Optuna's storage is gone)."""
    done = completed(trials)
    numbers = [t.number for t in done]
    values = np.array([t.objective for t in done], dtype=float)
    best = objective.running_best(values)
    fig = go.Figure(
        [
            go.Scatter(
                x=numbers,
                y=values,
                mode="markers",
                name=label,
                marker=dict(color=run_colour(0), size=8),
                hovertemplate="trial %{x}<br>%{y:.4g}<extra></extra>",
            ),
            go.Scatter(
                x=numbers,
                y=best,
                mode="lines",
                name="best value",
                line=dict(color=run_colour(1), shape="hv"),
                hovertemplate="best after trial %{x}: %{y:.4g}<extra></extra>",
            ),
        ]
    )
    return _history_axes(fig, label, max(numbers, default=0))


def _history_axes(fig: go.Figure, label: str, last: int) -> go.Figure:
    """Title, axis titles and whole-number trial ticks (about a dozen) for a history figure."""
    fig = styled(fig, f"{label} of each completed trial and the best so far", 460, legend_row=True)
    fig.update_xaxes(title_text="trial", dtick=max(1, -(-last // 12)))
    return fig.update_yaxes(title_text=label)


def optuna_importances(study: optuna.Study) -> go.Figure | str:
    """Optuna's parameter importances over the completed trials (at least `MIN_TRIALS`), or why they are not shown."""
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    varying = {
        name for name in {p for t in done for p in t.params} if len({repr(t.params.get(name)) for t in done}) > 1
    }
    if len(done) < MIN_TRIALS:
        return f"{too_few_text(len(done))}."
    if not varying:
        return (
            f"Parameter importances need parameters that differ; no parameter differs among the {len(done)} "
            "completed trials."
        )
    try:
        with warnings.catch_warnings():  # "some regimes have less than 2 trials" on small studies
            warnings.simplefilter("ignore")
            fig = optuna.visualization.plot_param_importances(study)
    except (ValueError, RuntimeError) as err:
        return f"Optuna could not compute parameter importances: {str(err).splitlines()[0]}"
    return styled(
        fig,
        f"Parameter importances over {len(done)} completed trials (share of the objective's variance)",
        120 + 36 * len(varying),
    )


def _chunk_ticks(chunks: Sequence[int]) -> list[int]:
    low, high = int(np.log2(min(chunks))), int(np.ceil(np.log2(max(chunks))))
    return [2**k for k in range(low, high + 1)]


def chunk_vs_objective(trials: Sequence[TrialRow], label: str, best: TrialRow | None = None) -> go.Figure:
    """Completed trials' objective against their chunk size, one colour per pipeline mode; pruned trials grey."""
    done = [(t, t.config) for t in completed(trials) if t.config]
    pruned = [
        (t, t.config)
        for t in trials
        if t.state == "PRUNED" and t.config and t.metrics.get("fails_slo_at_rps") is not None
    ]
    fig = go.Figure()
    if pruned:
        fig.add_trace(
            go.Scatter(
                x=[c["chunk"] for _, c in pruned],
                y=[t.metrics["fails_slo_at_rps"] for t, _ in pruned],
                mode="markers",
                name="pruned: fails the SLO at this rate",
                marker=dict(symbol="x-thin", size=9, color=PRUNED_COLOUR, line=dict(width=1.5, color=PRUNED_COLOUR)),
                customdata=[[t.number, c["mode"]] for t, c in pruned],
                hovertemplate="trial %{customdata[0]} (%{customdata[1]}), pruned<br>chunk %{x} tokens<br>"
                "fails the SLO at %{y:.4g}<extra></extra>",
            )
        )
    known = list(MODES)

    def order(mode: str) -> int:
        return known.index(mode) if mode in known else len(known)

    for mode in sorted({str(c["mode"]) for _, c in done}, key=lambda m: (order(m), m)):
        mine = [(t, c) for t, c in done if c["mode"] == mode]
        fig.add_trace(
            go.Scatter(
                x=[c["chunk"] for _, c in mine],
                y=[t.objective for t, _ in mine],
                mode="markers",
                name=mode,
                marker=dict(color=run_colour(order(mode)), size=10, opacity=0.85, line=dict(width=1, color="white")),
                customdata=[[t.number, f"{c['tp']}×{c['pp']}", split_text(c["layer_split"])] for t, c in mine],
                hovertemplate=(
                    f"{mode}, trial %{{customdata[0]}}<br>chunk %{{x}} tokens, tp×pp %{{customdata[1]}}<br>"
                    f"layer split %{{customdata[2]}}<br>{label} %{{y:.4g}}<extra></extra>"
                ),
            )
        )
    if best is not None and best.config:
        fig.add_trace(
            go.Scatter(
                x=[best.config["chunk"]],
                y=[best.objective],
                mode="markers",
                name=f"best (trial {best.number})",
                hoverinfo="skip",
                marker=dict(symbol="circle-open", size=20, color="#222", line=dict(width=2.5)),
            )
        )
    chunks = [chunk for _, c in done + pruned if isinstance(chunk := c["chunk"], int)]
    ticks = _chunk_ticks(chunks) if chunks else []
    fig.update_xaxes(
        type="log",
        title_text="chunk size (tokens, log scale)",
        tickvals=ticks,
        ticktext=[format_tokens(v) for v in ticks],
    )
    fig.update_yaxes(title_text=label, rangemode="tozero")
    fig = styled(fig, f"Chunk size against {label} by pipeline mode", 460)
    fig.update_layout(legend=dict(title_text="mode"))
    return fig


_CONFIG_ROWS: tuple[tuple[str, Callable[[dict[str, object]], str]], ...] = (
    ("mode", lambda c: str(c["mode"])),
    ("tp × pp", lambda c: f"{c['tp']} × {c['pp']}"),
    ("chunk (tokens)", lambda c: tokens_text(c["chunk"])),
    ("layer split", lambda c: split_text(c["layer_split"])),
    (
        "DCPP smooth factor / min chunk",
        lambda c: f"{c['smooth_factor']:.3g} / {tokens_text(c['min_chunk'])}" if c["mode"] == "dcpp" else "-",
    ),
    ("max running requests", lambda c: str(c["max_running"])),
)


_METRIC_ROWS = (
    ("goodput_rps", "goodput (req/s)", 1.0, ".4g"),
    ("attainment", "SLO attainment", 1.0, ".1%"),
    ("ttft_p90_s", "TTFT P90 (s)", 1.0, ".4g"),
    ("ttft_p99_s", "TTFT P99 (s)", 1.0, ".4g"),
    ("tpot_p90_s", "TPOT P90 (ms)", 1e3, ".4g"),
    ("tpot_p99_s", "TPOT P99 (ms)", 1e3, ".4g"),
    ("throughput_tok_s", "throughput (tok/s)", 1.0, ",.0f"),
    ("bubble_ratio", "bubble ratio", 1.0, ".1%"),
)


def _measured(key: str, metrics: dict[str, object]) -> float | None:
    """A trial's metric; None where it has none. A TPOT is never 0: a stored 0 is an older study's
    placeholder for one-token outputs, which have no TPOT."""
    value = metrics.get(key)
    if not isinstance(value, (int, float)) or (key.startswith("tpot") and value == 0):
        return None
    return float(value)


def improvement(best: float | None, default: float | None, objective: Objective) -> float | None:
    """How many times better best is than default (above 1 is better, whatever the direction); None when either
    has no value (or a value of 0)."""
    if not best or not default:
        return None
    return objective.ratio(best, default)


def _gain_cell(best: TrialRow, default: TrialRow | None, gain: float | None, objective: Objective) -> str:
    """How much better the best is, in the objective's terms (in bold unless the paired seeds say it is not a
    clear win, as `tune` says it)."""
    if gain is None or default is None:
        return ""
    text = objective.better_by(gain)
    win = clear_win(stored_interval(best.metrics), stored_interval(default.metrics), objective)
    return f"{text}: not a clear win" if win is False else f"<b>{text}</b>"


def best_vs_default(best: TrialRow, default: TrialRow | None, objective: Objective) -> go.Figure:
    """A table of the best trial's config and metrics next to the default config's, with their ratio."""
    label = objective.label
    shown = [best] + ([default] if default is not None else [])
    rows: list[list[str]] = []
    for name, cell in _CONFIG_ROWS:
        rows.append([name, *(cell(t.config) if t.config else "-" for t in shown), ""])
    gain = improvement(best.objective, default.objective, objective) if default is not None else None
    rows.append(
        [
            f"<b>{label}</b>",
            *(f"<b>{t.objective:.4g}</b>" for t in shown),
            _gain_cell(best, default, gain, objective),
        ]
    )
    for key, name, scale, fmt in _METRIC_ROWS:
        if key == objective.metric or not any(key in t.metrics for t in shown):
            continue
        values = [_measured(key, t.metrics) for t in shown]
        ratio = ""
        if default is not None:
            mine, theirs = values
            if mine is not None and theirs:
                ratio = f"{mine / theirs:.2f}×"
        rows.append(
            [
                name,
                *(
                    ("n/a" if key in t.metrics else "-") if v is None else format(v * scale, fmt)
                    for v, t in zip(values, shown)
                ),
                ratio,
            ]
        )
    headers = ["", f"best (trial {best.number})"] + (
        [f"default (trial {default.number})", "best / default"] if default is not None else []
    )
    columns = [list(col) for col in zip(*rows)]
    fig = go.Figure(
        go.Table(
            columnwidth=[1.4, 1, 1, 0.8],
            header=dict(
                values=[f"<b>{h}</b>" for h in headers], fill_color="#eef1f5", align="left", font=dict(size=13)
            ),
            cells=dict(
                values=columns[: len(headers)],
                align="left",
                height=CELL_PX,
                font=dict(size=13),
                fill_color=[["#ffffff", "#f8f9fb"] * len(rows)],
            ),
        )
    )
    fig = styled(fig, "Best config against the engine default", 90 + (CELL_PX + 1) * (len(rows) + 1))
    fig.update_layout(margin=dict(l=20, r=20, t=60, b=10))
    return fig
