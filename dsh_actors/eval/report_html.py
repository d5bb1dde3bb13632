"""``summary.html``: the run as one self-contained page (no script, no network, no fonts).

What it shows, top to bottom: the run in numbers; each tool's latency distribution (a bar
per latency band, and p50/p90/p99/max); outcomes and error codes; model time vs tool time;
the slowest episodes; and the episode table, each id linking to that episode's log
rendered as its cards (as ``dsh-actors show`` renders them). Cards are included for at
most :data:`CARDS_FOR` episodes — failed ones first, then the slowest, then in order —
so a 10,000-episode run stays a page a browser opens; the others say how to see theirs.
"""

from __future__ import annotations

import html
import itertools
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from .reports import EpisodeReport, percentile

__all__ = ["CARDS_FOR", "render_html"]

CARDS_FOR = 200
_BANDS = [(0, 1), (1, 5), (5, 10), (10, 50), (50, 100), (100, 500), (500, 1000), (1000, 5000), (5000, None)]

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;
color:#1d2430;background:#fbfbfd}
h1{font-size:1.6rem;margin:0 0 .3rem}h2{font-size:1.15rem;margin:2rem 0 .6rem;border-bottom:1px solid #dde2ea}
.numbers{display:flex;flex-wrap:wrap;gap:.8rem;margin:1rem 0}
.numbers div{background:#fff;border:1px solid #dde2ea;border-radius:8px;padding:.6rem 1rem;min-width:8rem}
.numbers b{display:block;font-size:1.5rem}.numbers span{color:#5b6577;font-size:.85rem}
table{border-collapse:collapse;width:100%;background:#fff}th,td{border:1px solid #dde2ea;padding:.3rem .55rem;
text-align:left;vertical-align:top}th{background:#f1f4f9}td.n{text-align:right;font-variant-numeric:tabular-nums}
.bar{display:inline-block;height:.8rem;background:#4a7bd0;border-radius:2px;vertical-align:middle}
.bar.tool{background:#d08a4a}.failed{color:#b42318;font-weight:600}.ok{color:#137333}
pre{background:#fff;border:1px solid #dde2ea;border-radius:6px;padding:.7rem;overflow-x:auto;white-space:pre-wrap;
font:12.5px/1.4 ui-monospace,Menlo,Consolas,monospace}
details{margin:.5rem 0}summary{cursor:pointer;font-weight:600}
.hist{display:flex;align-items:flex-end;gap:3px;height:2rem;min-width:12rem;border-bottom:1px solid #b8c2d3}
.hist span{flex:1;background:#4a7bd0;border-radius:2px 2px 0 0}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _anchor(episode_id: str) -> str:
    return "ep-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in episode_id)


def _ms(value: float | None) -> str:
    return "—" if value is None else (f"{value:,.1f}" if value < 1000 else f"{value:,.0f}")


def _bar(fraction: float, kind: str = "") -> str:
    width = max(0.0, min(1.0, fraction)) * 16
    return f'<span class="bar {kind}" style="width:{width:.2f}rem"></span>'


def _band(lo: float, hi: float | None) -> str:
    def said(ms: float) -> str:
        return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"
    return f"< {said(hi)}" if lo == 0 and hi is not None else (f"≥ {said(lo)}" if hi is None else
                                                               f"{said(lo)}–{said(hi)}")


def _tool_latency(reports: Sequence[EpisodeReport]) -> list[str]:
    by_tool: dict[str, list[float]] = defaultdict(list)
    for report in reports:
        tools = report.call_tools if len(report.call_tools) == len(report.latencies_ms) else [""] * len(
            report.latencies_ms)
        for tool, ms in zip(tools, report.latencies_ms):
            by_tool[tool or "(unnamed)"].append(ms)
    if not by_tool:
        return ["<p>No tool calls.</p>"]
    bands = ", ".join(_band(lo, hi) for lo, hi in _BANDS)
    rows = [f"<table><tr><th>tool</th><th>calls</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th>"
            f"<th title='{bands}'>distribution ({_band(*_BANDS[0])} … {_band(*_BANDS[-1])})</th></tr>"]
    for tool, values in sorted(by_tool.items(), key=lambda item: -len(item[1])):
        counts = [sum(1 for v in values if v >= lo and (hi is None or v < hi)) for lo, hi in _BANDS]
        top = max(counts) or 1
        bars = "".join(f'<span title="{_band(lo, hi)}: {c} call(s)" style="height:{max(4, 100 * c // top) if c else 0}%">'
                       "</span>" for c, (lo, hi) in zip(counts, _BANDS))
        rows.append(f"<tr><td>{_e(tool)}</td><td class=n>{len(values):,}</td>"
                    + "".join(f"<td class=n>{_ms(percentile(values, p))}</td>" for p in (50, 90, 99))
                    + f"<td class=n>{_ms(max(values))}</td><td><div class=hist>{bars}</div></td></tr>")
    rows.append("</table>")
    return rows


def _outcomes(summary: dict[str, Any]) -> list[str]:
    total = summary["calls"] or 1
    rows = ["<table><tr><th>outcome</th><th>calls</th><th></th></tr>"]
    for label, count in (("ok", summary["ok"]), ("policy denials (denied or blocked)", summary["denials"]),
                         ("tool errors", summary["tool_errors"])):
        rows.append(f"<tr><td>{label}</td><td class=n>{count:,}</td><td>{_bar(count / total)}</td></tr>")
    rows.append("</table>")
    codes = summary["errors_by_code"]
    if codes:
        rows.append("<table><tr><th>error code</th><th>calls</th></tr>" + "".join(
            f"<tr><td>{_e(code)}</td><td class=n>{count:,}</td></tr>" for code, count in codes.items()) + "</table>")
    return rows


def _model_vs_tool(summary: dict[str, Any]) -> list[str]:
    model = summary.get("model")
    if not model:
        return ["<p>No episode had a model in the loop.</p>"]
    model_s, tool_s = model["model_s"], model["tool_s"]
    whole = (model_s + tool_s) or 1
    return [f"<p>{model['episodes']:,} model episodes, success {_e(model.get('success_rate'))}, "
            f"{model['turns']:,} turns; stops: {_e(', '.join(f'{k} {v}' for k, v in model['stops'].items()))}.</p>",
            "<table><tr><th></th><th>seconds</th><th></th></tr>",
            f"<tr><td>waiting for the model</td><td class=n>{model_s:,.2f}</td><td>{_bar(model_s / whole)}</td></tr>",
            f"<tr><td>in tool steps</td><td class=n>{tool_s:,.2f}</td><td>{_bar(tool_s / whole, 'tool')}</td></tr>",
            "</table>"]


def _spent_ms(report: EpisodeReport) -> float:
    return (report.model_s + report.tool_s) * 1000 if report.stop is not None else sum(report.latencies_ms)


def _cards(report: EpisodeReport, logs: Path | None) -> str:
    from .show import show_log

    log = logs / f"{report.id}.log" if logs is not None else None
    if log is None or not log.is_file():
        return "<p>(no log)</p>"
    try:
        text, damage = show_log(log, report.workspace)
    except Exception as exc:  # noqa: BLE001 - one unreadable log must not lose the page
        return f"<p class=failed>its log could not be read: {_e(exc)}</p>"
    said = f"<p class=failed>{_e(damage)}</p>" if damage else ""
    return f"{said}<pre>{_e(text)}</pre>"


def render_html(summary: dict[str, Any], reports: Sequence[EpisodeReport], logs: Path | None,
                title: str = "Evaluation report") -> str:
    """The page for a run's ``summary`` and ``reports`` (``logs``: the run's ``logs/`` folder)."""
    latency = summary["latency_ms"]
    numbers = [("episodes", f"{summary['episodes']:,}"), ("ok", f"{summary['episodes_ok']:,}"),
               ("failed", f"{summary['episodes_failed']:,}"), ("calls", f"{summary['calls']:,}"),
               ("p50 call ms", _ms(latency["p50"])), ("p99 call ms", _ms(latency["p99"])),
               ("wall s", f"{summary['wall_s']:,}")]
    out = ["<!doctype html><html lang=en><head><meta charset=utf-8>",
           "<meta name=viewport content='width=device-width,initial-scale=1'>",
           f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
           f"<h1>{_e(title)}</h1><p>{_e(summary.get('out', ''))}</p><div class=numbers>",
           *(f"<div><b>{value}</b><span>{label}</span></div>" for label, value in numbers), "</div>",
           "<h2>Latency by tool</h2>", *_tool_latency(reports),
           "<h2>Outcomes</h2>", *_outcomes(summary),
           "<h2>Model time vs tool time</h2>", *_model_vs_tool(summary),
           "<h2>Slowest episodes</h2><table><tr><th>episode</th><th>status</th><th>ms</th><th>calls</th></tr>"]
    slowest = sorted(reports, key=_spent_ms, reverse=True)[:10]
    top = _spent_ms(slowest[0]) if slowest else 1.0
    for report in slowest:
        out.append(f"<tr><td><a href='#{_anchor(report.id)}'>{_e(report.id)}</a></td><td>{_e(report.status)}</td>"
                   f"<td class=n>{_ms(_spent_ms(report))} {_bar(_spent_ms(report) / (top or 1))}</td>"
                   f"<td class=n>{report.calls}</td></tr>")
    out.append("</table>")
    chosen: list[EpisodeReport] = []
    seen: set[str] = set()
    for report in itertools.chain((r for r in reports if r.status != "ok"), slowest, reports):
        if report.id not in seen and len(chosen) < CARDS_FOR:
            seen.add(report.id)
            chosen.append(report)
    shown = {r.id for r in chosen}
    out += ["<h2>Episodes</h2><table><tr><th>episode</th><th>agent</th><th>status</th><th>calls</th><th>ok</th>"
            "<th>denied</th><th>errors</th><th>stop</th><th>success</th></tr>"]
    for report in reports:
        status = f"<span class={'ok' if report.status == 'ok' else 'failed'}>{_e(report.status)}</span>"
        link = (f"<a href='#{_anchor(report.id)}'>{_e(report.id)}</a>" if report.id in shown else _e(report.id))
        errors = ", ".join(f"{k} {v}" for k, v in sorted(report.errors.items()))
        out.append(f"<tr><td>{link}</td><td>{_e(report.agent)}</td><td>{status}</td><td class=n>{report.calls}</td>"
                   f"<td class=n>{report.ok}</td><td class=n>{report.denied}</td><td>{_e(errors)}</td>"
                   f"<td>{_e(report.stop or '')}</td><td>{_e('' if report.success is None else report.success)}</td>"
                   "</tr>")
    out.append("</table>")
    if len(reports) > len(chosen):
        out.append(f"<p>Cards of {len(chosen)} of {len(reports):,} episodes below (failed, then slowest, then in "
                   "order); for another: <code>dsh-actors show logs/&lt;episode&gt;.log</code>.</p>")
    out.append("<h2>Episode logs</h2>")
    for report in chosen:
        message = f" — {_e(report.message)}" if report.message else ""
        out.append(f"<details id='{_anchor(report.id)}'{' open' if report.status != 'ok' else ''}><summary>"
                   f"{_e(report.id)} ({_e(report.status)}{message})</summary>{_cards(report, logs)}</details>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
