"""`trainq tune`: start a tuning experiment from a spec file, list them, show one (its trials
sorted by the objective, the best trial's model directory, the objective's curves), stop one.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainq.context import Context
from trainq.core.errors import InvalidSpec, TrainqError
from trainq.humanize import pretty_json
from trainq.metric_lines import number, sparkline, step_text
from trainq.spec_flags import SubmitFlags
from trainq.specfile import build_spec, load_spec_file

CURVES = 10  # trials whose curves `show` draws
PLOTTED = 100  # trials whose curves --plot draws


def start(ctx: Context, args: argparse.Namespace) -> int:
    if ctx.cwd is None:
        raise InvalidSpec("the current directory no longer exists; cd to one that does")
    spec = build_spec(
        load_spec_file(args.file, ctx.cwd, ctx.environ), SubmitFlags(), ctx.cwd, ctx.environ
    )
    table = spec.pop("tune", None)
    if not isinstance(table, dict):
        raise InvalidSpec(
            f"{args.file} has no [tune] table: what to search and for which objective"
        )
    record = ctx.client().post_tunes(spec, table)
    ctx.print(pretty_json(record) if args.json else str(record["id"]))
    return 0


def _summary(tune: dict[str, Any]) -> str:
    trials = tune.get("trials") or []
    return (
        f"tune {tune['id']}  {tune['state']}  {tune['owner']['user']}  {tune['direction']} "
        f"{tune['objective']}  {tune['search']} + {tune['early_stopping']}  "
        f"{len(trials)}/{tune['max_trials']} trials, {tune['max_parallel']} at once"
    )


def listing(ctx: Context, args: argparse.Namespace) -> int:
    body = ctx.client().get_tunes()
    if args.json:
        ctx.print(pretty_json(body))
        return 0
    tunes = body.get("tunes") or []
    if not tunes:
        ctx.say("no tunes")
        return 0
    ctx.print("\n".join(_summary(t) for t in tunes))
    return 0


def _sorted(tune: dict[str, Any]) -> list[dict[str, Any]]:
    sign = 1 if tune["direction"] == "minimize" else -1
    return sorted(
        tune.get("trials") or [],
        key=lambda t: (t.get("best") is None, sign * (t.get("best") or 0.0), t["number"]),
    )


def _params(trial: dict[str, Any]) -> str:
    params = trial.get("params")
    if params is None:
        return "(hidden)"
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()
    )


def _curve(ctx: Context, tune: dict[str, Any], trial: dict[str, Any]) -> list[tuple[float, float]]:
    """The trial's objective, (step, value) over its attempts; empty if not yours to read."""
    try:
        body = ctx.client().get_job_metrics(trial["job_id"])
    except TrainqError:
        return []
    return [
        (float(point[0]), float(point[1]))
        for attempt in body.get("attempts") or []
        for point in (attempt.get("series") or {}).get(tune["objective"], {}).get("points") or []
    ]


def _plot(ctx: Context, tune: dict[str, Any], trials: list[dict[str, Any]], path: str) -> None:
    from trainq import curve_png  # noqa: PLC0415 (only with --plot)

    curves = [_curve(ctx, tune, t) for t in trials[:PLOTTED]]
    numbers = [t["number"] for t in trials[:PLOTTED]]
    best = tune.get("best_trial")
    target = Path(path) if ctx.cwd is None else ctx.cwd / path
    curve_png.write(target, curves, numbers.index(best) if best in numbers else None)
    ctx.say(f"wrote the curves of {len(curves)} trials to {target}")


def show(ctx: Context, args: argparse.Namespace) -> int:
    tune = ctx.client().get_tune(args.tune)
    if args.json:
        ctx.print(pretty_json(tune))
        return 0
    lines = [_summary(tune)]
    if tune.get("reason"):
        lines.append(f"ended: {tune['reason']}")
    trials = _sorted(tune)
    best = next((t for t in trials if t["number"] == tune.get("best_trial")), None)
    if best is not None:
        lines.append(
            f"best: trial {best['number']} (job {best['job_id']}), {tune['objective']} "
            f"{number(best.get('best'))}; model: {best.get('model_dir') or '(hidden)'}"
        )
    lines.append(f"{'#':>3} {'job':>5}  {'state':<9} {'last':>10} {'best':>10} {'step':>6}  params")
    for trial in trials:
        step = trial.get("step")
        lines.append(
            f"{trial['number']:>3} {trial['job_id']:>5}  {trial['state']:<9} "
            f"{number(trial.get('value')):>10} {number(trial.get('best')):>10} "
            f"{'-' if step is None else step_text(step):>6}  {_params(trial)}"
        )
        if trial.get("reason") and trial["state"] != "completed":
            lines.append(f"{'':>11}{trial['reason']}")
    curves = [
        (t, sparkline([v for _, v in _curve(ctx, tune, t)], width=30)) for t in trials[:CURVES]
    ]
    if any(curve for _, curve in curves):
        lines.append(f"{tune['objective']} by step:")
        lines.extend(f"  trial {t['number']:>3}  {curve}" for t, curve in curves if curve)
    ctx.print("\n".join(lines))
    if args.plot:
        _plot(ctx, tune, trials, args.plot)
    return 0


def stop(ctx: Context, args: argparse.Namespace) -> int:
    tune = ctx.client().post_tune_stop(args.tune)
    ctx.print(str(tune["state"]))
    return 0


def run(ctx: Context, args: argparse.Namespace) -> int:
    if args.action is None:
        return start(ctx, args)
    if args.action == "ls":
        return listing(ctx, args)
    if args.action == "show":
        return show(ctx, args)
    return stop(ctx, args)
