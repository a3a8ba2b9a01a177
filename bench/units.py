"""Benchmark of the units reconciliation at firehose scale, DuckDB and Postgres (not a test).

    .venv/bin/python -m bench.units                              # 10 M units a day (the full run)
    .venv/bin/python -m bench.units --units-per-day 200000       # smoke: under 2 minutes
    .venv/bin/python -m bench.units --engines duckdb             # one engine

Two days of production (the units window) with the generator's replays, retries, duplicates
and garbage are landed once; then, on each engine, in a fresh warehouse:
1. load: the loader puts every complete batch of the 2 days into the raw table (sha256 and
   cleanliness pre-pass, then the engine reads the lines);
2. the nightly run right after (lock, nothing left to load, dbt build of every units and shared
   model and gate from those raw lines, publish), node by node;
3. the same reconciliation as one hand-written statement from the same raw lines
   (bench/handwritten.py: decode by the contract, validate, each unit once at its first
   arrival, good units per SKU and day), checked equal to daily_good_units row for row;
4. the nightly run again with nothing new to load (the build of the window from what was
   already decoded), node by node, for reference.
Goals: the load at least 4x faster than before (259 s DuckDB, 401 s Postgres), the whole
nightly build within 3x (DuckDB) / 2x (Postgres) of the hand-written statement.

Data under /work/bench-data (DAYCLOSE_BENCH_DATA); raw results in bench/results/.
"""

from __future__ import annotations

import argparse
import json
from datetime import date, datetime
from pathlib import Path

from bench.common import (
    DATA,
    ENGINES,
    Timer,
    dbt_log_status,
    fresh_target,
    load_average,
    log,
    machine,
    node_seconds,
    table,
    ticking,
    top_nodes,
    units_landing,
    write_results,
)
from bench.handwritten import differences, run_statement, units_sql

FIRST_DAY = date(2026, 11, 1)
AS_OF = datetime(2026, 11, 3, 0, 30)
WINDOW = (date(2026, 11, 1), date(2026, 11, 3))
BEFORE = {
    "duckdb": {"load_s": 259.0, "build_s": 125.3, "hand_s": 10.6},
    "postgres": {"load_s": 401.0, "build_s": 309.5, "hand_s": 92.6},
}


def nightly(target, landing: Path, what: str) -> dict:
    from dayclose.jobs import run_nightly

    clock = Timer()
    with ticking(what, every=15, status=dbt_log_status(target.state_dir)):
        summary = run_nightly("units", target, landing, AS_OF, quiet=True)
    seconds = clock.seconds
    if not summary.ok:
        raise SystemExit("\n".join(summary.lines()))
    return {
        "seconds": seconds,
        "load": round(load_average(), 2),
        "lines_loaded": summary.load.rows_loaded,
        "window": [str(d) for d in summary.window],
        "steps": {k: round(v, 3) for k, v in summary.step_seconds.items()},
        "nodes": node_seconds(summary.build),
    }


def case(engine: str, landing: Path, workdir: Path, rerun: bool = True) -> dict:
    from dayclose.loader import load_source
    from dayclose.sources import source
    from dayclose.warehouse import Warehouse

    r: dict = {}
    with fresh_target(engine, workdir) as target:
        log(f"{engine}: 1. load of the 2-day window")
        with Warehouse(target) as wh:
            clock = Timer()
            with ticking(f"{engine} load", every=30):
                report = load_source(wh, source("units"), landing, AS_OF, progress=lambda m: log("  " + m))
            r["load"] = {
                "seconds": clock.seconds,
                "lines": report.rows_loaded,
                "batches": len(report.loaded),
                "load": round(load_average(), 2),
            }
        r["load"]["lines_per_s"] = r["load"]["lines"] / r["load"]["seconds"]
        log(
            f"  {r['load']['lines']:,} lines in {r['load']['seconds']:.1f} s "
            f"({r['load']['lines_per_s']:,.0f} lines/s)"
        )

        log(f"{engine}: 2. nightly run from those raw lines (every model and gate)")
        r["nightly"] = nightly(target, landing, f"{engine} nightly build")
        steps = r["nightly"]["steps"]
        log(
            f"  {r['nightly']['seconds']:.1f} s: build {steps.get('build', 0):.1f}, "
            f"publish {steps.get('publish', 0):.1f}"
        )
        log(f"  top nodes: {top_nodes(r['nightly']['nodes'])}")

        log(f"{engine}: 3. hand-written statement from the raw lines")
        with Warehouse(target) as wh:
            sql = units_sql(
                wh.kind, target.schema, "bench_daily_good_units_hand", WINDOW[0], WINDOW[1], AS_OF
            )
            with ticking(f"{engine} hand-written statement", every=15):
                seconds = run_statement(wh, "bench_daily_good_units_hand", sql)
            diff = differences(
                wh,
                f"{target.schema}.bench_daily_good_units_hand",
                f"{target.schema}.daily_good_units",
                ["production_date", "sku", "good_units", "rejected_units"],
                "production_date",
                *WINDOW,
            )
            good = wh.scalar(f"select sum(good_units) from {target.schema}.bench_daily_good_units_hand")
        if diff:
            raise SystemExit(f"hand-written statement and daily_good_units differ in {diff} rows")
        r["hand"] = {
            "seconds": seconds,
            "good_units": good,
            "equal_to_daily_good_units": True,
            "load": round(load_average(), 2),
        }
        log(f"  {seconds:.1f} s, {good:,} good units, equal to daily_good_units")

        if rerun:
            log(f"{engine}: 4. nightly run again, nothing new to load")
            r["rerun"] = nightly(target, landing, f"{engine} rerun")
            log(f"  {r['rerun']['seconds']:.1f} s; top nodes: {top_nodes(r['rerun']['nodes'], 5)}")
    build = r["nightly"]["steps"].get("build", 0.0)
    r["build_s"] = build
    r["build_vs_hand"] = build / r["hand"]["seconds"]
    r["nightly_vs_hand"] = r["nightly"]["seconds"] / r["hand"]["seconds"]
    r["load_speedup_vs_before"] = BEFORE[engine]["load_s"] / r["load"]["seconds"]
    return r


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--units-per-day", type=int, default=10_000_000)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--workdir", default=str(DATA / "work"))
    parser.add_argument(
        "--no-rerun", action="store_true", help="skip step 4 (the rerun with nothing to load)"
    )
    args = parser.parse_args()
    workdir = Path(args.workdir)
    log(f"bench.units: {json.dumps(vars(args))}")
    landing = units_landing(2, args.units_per_day)
    results: dict = {"machine": machine(), "args": vars(args), "landing": str(landing), "engines": {}}
    for engine in args.engines.split(","):
        results["engines"][engine] = case(engine, landing, workdir, rerun=not args.no_rerun)
        write_results("bench-units-partial", results)
    results["machine"]["load_at_end"] = load_average()
    out = write_results("bench-units", results)
    print(render(results, args))
    print(f"\nraw results: {out}")


def render(results: dict, args: argparse.Namespace) -> str:
    e = results["engines"]
    cols = list(e)
    rows = [
        (
            "lines loaded (2 days with replays, duplicates, garbage)",
            [e[c]["load"]["lines"] for c in cols],
            "{:,}",
        ),
        ("load of the 2-day window (s)", [e[c]["load"]["seconds"] for c in cols], "{:.1f}"),
        (
            "  speed-up against before (259 / 401 s; goal >= 4x)",
            [e[c]["load_speedup_vs_before"] for c in cols],
            "{:.1f}x",
        ),
        (
            "whole nightly build, every model and gate, from the raw lines (s)",
            [e[c]["build_s"] for c in cols],
            "{:.1f}",
        ),
        (
            "nightly run: lock, build, publish, audit (s)",
            [e[c]["nightly"]["seconds"] for c in cols],
            "{:.1f}",
        ),
        ("hand-written statement from the raw lines (s)", [e[c]["hand"]["seconds"] for c in cols], "{:.1f}"),
        (
            "build / hand-written (goal <= 3 DuckDB, <= 2 Postgres)",
            [e[c]["build_vs_hand"] for c in cols],
            "{:.2f}",
        ),
        (
            "rerun, nothing new to load: whole run (s)",
            [e[c].get("rerun", {}).get("seconds") for c in cols],
            "{:.1f}",
        ),
    ]
    return table([f"units, {args.units_per_day:,} units/day"] + cols, rows)


if __name__ == "__main__":
    main()
