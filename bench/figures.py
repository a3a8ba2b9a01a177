"""Markdown tables of the latest raw results in bench/results/ (for the README and docs/benchmarks.md).

    .venv/bin/python -m bench.figures                 # the newest bench-sales, bench-units, bench-peer files
    .venv/bin/python -m bench.figures FILE.json ...   # these files (sales, units and peer results merged)

Several sales or units files (one engine each) are merged, the newest last.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.common import RESULTS, table


def _latest(prefix: str) -> list[Path]:
    files = sorted(p for p in RESULTS.glob(f"{prefix}-2*.json"))
    return files[-1:]


def _load(paths: list[Path]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {"sales": [], "units": [], "peer": []}
    for p in paths:
        doc = json.loads(p.read_text())
        doc["_file"] = p.name
        kind = "peer" if "cases" in doc else "units" if "landing" in doc else "sales"
        out[kind].append(doc)
    return out


def _engines(docs: list[dict]) -> tuple[dict, list[dict]]:
    merged: dict = {}
    for d in docs:
        merged.update(d["engines"])
    return merged, docs


def _get(d: dict, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def sales_tables(docs: list[dict]) -> str:
    e, _ = _engines(docs)
    cols = list(e)
    args = {c: next(d["args"] for d in docs if c in d["engines"]) for c in cols}

    def hist(c: str, which: str, *path):
        days = args[c][f"{which}_days"]
        return _get(e[c], f"history_{days}d", *path)

    rows = [
        (
            "(a) history of the short / long case (days)",
            [f"{args[c]['short_days']} / {args[c]['long_days']}" for c in cols],
            "{}",
        ),
        (
            "(a) nightly run, short history (s): lock, load 24 batches, build with every gate, publish",
            [hist(c, "short", "nightly_s") for c in cols],
            "{:.2f}",
        ),
        ("(a) nightly run, long history (s)", [hist(c, "long", "nightly_s") for c in cols], "{:.2f}"),
        ("(a) ratio long / short (goal <= 1.2)", [_get(e[c], "history_ratio") for c in cols], "**{:.2f}**"),
        (
            "(a) load average during the timed nights (short / long)",
            [
                f"{hist(c, 'short', 'nights', 0, 'load')} / {hist(c, 'long', 'nights', 0, 'load')}"
                for c in cols
            ],
            "{}",
        ),
        (
            "(b) rerun with nothing to load, long history (s)",
            [hist(c, "long", "rerun_s") for c in cols],
            "{:.2f}",
        ),
        (
            "(b) the window as one hand-written statement from the raw lines (s)",
            [hist(c, "long", "hand_sql_s") for c in cols],
            "{:.2f}",
        ),
        ("(b) nightly run / hand-written", [_get(e[c], "nightly_vs_hand_sql") for c in cols], "{:.1f}x"),
        (
            "(c) loader, lines/s (sha256 + pre-pass, engine reads the lines)",
            [_get(e[c], "loader", "lines_per_s") for c in cols],
            "{:,.0f}",
        ),
        (
            "(c) bare bulk load of the same files, lines/s (DuckDB read_csv of one column / Postgres COPY)",
            [_get(e[c], "bulk", "lines_per_s") for c in cols],
            "{:,.0f}",
        ),
        (
            "(c) DuckDB read_json of the same files, rows/s (reference)",
            [_get(e[c], "bulk", "read_json_rows_per_s") for c in cols],
            "{:,.0f}",
        ),
        (
            "(c) loader / bare bulk load (goal >= 0.5)",
            [_get(e[c], "loader_vs_bulk") for c in cols],
            "**{:.2f}**",
        ),
    ]
    sizes = sorted({int(n) for c in cols for n in (_get(e[c], "memory") or {})})
    for n in sizes:
        rows.append(
            (
                f"(d) peak memory (VmHWM) of the loading process, {n:,} events/day (MiB)",
                [_get(e[c], "memory", str(n), "peak_mib") for c in cols],
                "{:,.0f}",
            )
        )
        rows.append(
            (
                f"(d) ... its load time for {n:,} events (s)",
                [_get(e[c], "memory", str(n), "seconds") for c in cols],
                "{:,.0f}",
            )
        )
    per_day = docs[-1]["args"]["events_per_day"]
    return table([f"sales, {per_day:,} events/day"] + cols, rows)


def units_tables(docs: list[dict]) -> str:
    e, _ = _engines(docs)
    cols = list(e)
    rows = [
        (
            "lines loaded (2 days, with replays, retries and garbage)",
            [_get(e[c], "load", "lines") for c in cols],
            "{:,}",
        ),
        ("load of the 2-day window (s)", [_get(e[c], "load", "seconds") for c in cols], "{:.1f}"),
        (
            "  against before (259 s DuckDB, 401 s Postgres; goal >= 4x)",
            [_get(e[c], "load_speedup_vs_before") for c in cols],
            "**{:.1f}x**",
        ),
        (
            "whole nightly build from the raw lines: every model and gate (s)",
            [_get(e[c], "build_s") for c in cols],
            "{:.1f}",
        ),
        (
            "the nightly run around it: lock, build, publish, audit (s)",
            [_get(e[c], "nightly", "seconds") for c in cols],
            "{:.1f}",
        ),
        (
            "hand-written statement from the raw lines, equal to daily_good_units (s)",
            [_get(e[c], "hand", "seconds") for c in cols],
            "{:.1f}",
        ),
        (
            "build / hand-written (goal <= 3 DuckDB, <= 2 Postgres)",
            [_get(e[c], "build_vs_hand") for c in cols],
            "**{:.2f}**",
        ),
        ("rerun with nothing new to load (s)", [_get(e[c], "rerun", "seconds") for c in cols], "{:.1f}"),
        (
            "load average at the end of load / build / hand-written",
            [" / ".join(str(_get(e[c], step, "load")) for step in ("load", "nightly", "hand")) for c in cols],
            "{}",
        ),
    ]
    per_day = docs[-1]["args"]["units_per_day"]
    out = [table([f"units, {per_day:,} units/day"] + cols, rows)]
    for c in cols:
        nodes = _get(e[c], "nightly", "nodes") or []
        out.append(
            f"\nTop nodes of the {c} nightly build: "
            + ", ".join(f"`{n['name']}` {n['seconds']:.1f} s" for n in nodes[:8])
        )
    return "\n".join(out)


def peer_tables(docs: list[dict]) -> str:
    """The SQLMesh comparison as bench.peer_sqlmesh prints it, the cases of every file merged."""
    from bench.peer_sqlmesh import render

    merged: dict = {"args": docs[-1]["args"], "cases": {}}
    for d in docs:
        merged["cases"].update(d["cases"])
    return render(merged)


def main() -> None:
    paths = [Path(a) for a in sys.argv[1:]] or _latest("bench-sales") + _latest("bench-units") + _latest(
        "bench-peer"
    )
    docs = _load(paths)
    for kind, render in (("sales", sales_tables), ("units", units_tables), ("peer", peer_tables)):
        if docs[kind]:
            print(
                f"### {kind} ({', '.join(d['_file'] for d in docs[kind])}; "
                f"commit {docs[kind][-1]['machine'].get('git_commit')})\n"
            )
            print(render(docs[kind]))
            print()


if __name__ == "__main__":
    main()
