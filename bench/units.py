"""Benchmark of the units reconciliation, DuckDB and Postgres side by side (not a test).

    .venv/bin/python -m bench.units                          # 10 M units a day, the README figures
    .venv/bin/python -m bench.units --units-per-day 200000   # a smoke run

Two days of production are landed and loaded (the nightly window of units is two
days); then, on each engine:
- the dbt reconciliation alone (`dbt run` of daily_good_units: validate, dedup,
  aggregate the window), in a child process, with its peak memory;
- the same work as one hand-written SQL statement pair on the same engine;
- the whole nightly build (models and gates) for context.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime
from pathlib import Path

from bench.run import RESULTS, fresh_target
from dayclose import dbt_runner as dbt
from dayclose.generate import generate_units
from dayclose.jobs import run_nightly
from dayclose.settings import PROJECT_DIR, Target
from dayclose.warehouse import Warehouse

FIRST_DAY = date(2026, 11, 1)
AS_OF = datetime(2026, 11, 3, 0, 30)
WINDOW = (date(2026, 11, 1), date(2026, 11, 3))

HAND_SQL = """
insert into {s}.bench_daily_good_units_hand
select production_date, sku, sum(case when verdict = 'good' then 1 else 0 end)
from (
    select cast(u.event_at as date) as production_date, u.sku, u.verdict,
           row_number() over (
               partition by u.line_id, u.plc_seq
               order by u.received_at, u.batch_id, u.file_name, u.line_number
           ) as copy_number
    from {lnd}.unit_lines as u
    inner join {s}_reference.lines as l on u.line_id = l.line_id
    inner join {s}_reference.skus as k on u.sku = k.sku
    where u.event_at >= '{start}' and u.event_at < '{end}'
      and u.batch_completed_at <= '{as_of}'
      and u.decode_error is null
      and u.verdict in ('good', 'reject')
      and u.event_at >= l.commissioned_at
      and u.event_at <= u.received_at
) as x
where copy_number = 1
group by production_date, sku
"""


def reconciliation_child(target: Target) -> tuple[float, float, float]:
    """`dbt run` of daily_good_units for the window, in a fresh process.

    Returns the invocation's wall time (dbt start-up and parse included), its peak RSS (MiB),
    and the time dbt reports for the model itself (its batches' SQL).
    """
    args = dbt.dbt_args(target, ["run", "--select", "daily_good_units"], window=WINDOW, quiet=True)
    run_vars = {"as_of": str(AS_OF), "rebuilt_from": str(WINDOW[0]), "rebuilt_to": str(WINDOW[1])}
    code = (
        "import json, sys, time; from dayclose import dbt_runner as dbt\n"
        "from bench.memory import own_peak_mib\n"
        "from dayclose.settings import resolve_target\n"
        f"t = resolve_target({target.name!r}); started = time.perf_counter()\n"
        f"out = dbt.invoke(t, {args!r}, run_vars={run_vars!r})\n"
        "assert out.success, out.error or [n.message for n in out.failed()]\n"
        "print(json.dumps([time.perf_counter() - started, "
        "own_peak_mib(), "
        "sum(n.seconds for n in out.nodes if n.name == 'daily_good_units')]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=PROJECT_DIR,
        env=os.environ,
    )
    if done.returncode != 0:
        raise SystemExit(f"dbt reconciliation failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    seconds, mib, node_seconds = json.loads(done.stdout.strip().splitlines()[-1])
    return seconds, mib, node_seconds


def hand_written(target: Target) -> float:
    s, lnd = target.schema, target.landing_schema
    with Warehouse(target) as wh:
        wh.execute(
            f"create table if not exists {s}.bench_daily_good_units_hand "
            "(production_date date, sku varchar, good_units bigint)"
        )
        started = time.perf_counter()
        with wh.transaction():
            wh.execute(
                f"delete from {s}.bench_daily_good_units_hand "
                "where production_date >= %s and production_date < %s",
                WINDOW,
            )
            wh.execute(HAND_SQL.format(s=s, lnd=lnd, start=WINDOW[0], end=WINDOW[1], as_of=AS_OF))
        seconds = time.perf_counter() - started
        hand = wh.query(f"select sum(good_units) from {s}.bench_daily_good_units_hand")
        ours = wh.query(
            f"select sum(good_units) from {s}.daily_good_units "
            "where production_date >= %s and production_date < %s",
            WINDOW,
        )
    if hand != ours:
        raise SystemExit(f"hand-written SQL and daily_good_units disagree: {hand} vs {ours}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--units-per-day", type=int, default=10_000_000)
    parser.add_argument("--engines", default="duckdb,postgres")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="dayclose-bench-units-"))
    workdir.mkdir(parents=True, exist_ok=True)
    landing = workdir / f"landing-units-{args.units_per_day}"

    def log(message: str) -> None:
        print(f"[{datetime.now():%H:%M:%S}] {message}", flush=True)

    if not (landing / "truth").exists():
        log(f"generating 2 days x {args.units_per_day:,} units")
        generate_units(landing, FIRST_DAY, 2, plants=300, units_per_day=args.units_per_day, seed=3)
    results: dict = {"units_per_day": args.units_per_day, "engines": {}}
    for engine in args.engines.split(","):
        with fresh_target(engine, workdir) as target:
            log(f"{engine}: load and first build")
            started = time.perf_counter()
            first = run_nightly("units", target, landing, AS_OF, quiet=True)
            if not first.ok:
                raise SystemExit("\n".join(first.lines()))
            r = {
                "load_and_first_build_s": time.perf_counter() - started,
                "rows_loaded": first.load.rows_loaded,
                "load_s": first.load.seconds,
            }
            log(f"{engine}: reconciliation (dbt run of daily_good_units)")
            r["dbt_invocation_s"], r["dbt_peak_mib"], r["dbt_model_s"] = reconciliation_child(target)
            r["hand_sql_s"] = hand_written(target)
            r["ratio_model"] = r["dbt_model_s"] / r["hand_sql_s"]
            r["ratio_invocation"] = r["dbt_invocation_s"] / r["hand_sql_s"]
            started = time.perf_counter()
            again = run_nightly("units", target, landing, AS_OF, quiet=True)
            r["nightly_build_with_gates_s"] = time.perf_counter() - started
            assert again.ok, again.lines()
            results["engines"][engine] = r
            log(f"  {r}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"bench-units-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(results, indent=2))
    e = results["engines"]
    cols = list(e)
    rows = [
        ("units in the 2-day window (lines loaded)", "rows_loaded", "{:,.0f}"),
        ("dbt model daily_good_units: validate, dedup, aggregate (s)", "dbt_model_s", "{:.1f}"),
        ("whole `dbt run` of it, start-up and parse included (s)", "dbt_invocation_s", "{:.1f}"),
        ("same work, hand-written SQL (s)", "hand_sql_s", "{:.1f}"),
        ("ratio dbt model / hand-written (goal on DuckDB <= 1.5)", "ratio_model", "{:.2f}"),
        ("ratio whole dbt run / hand-written", "ratio_invocation", "{:.2f}"),
        ("peak memory of the dbt process (MiB)", "dbt_peak_mib", "{:.0f}"),
        ("whole nightly build with gates, nothing to load (s)", "nightly_build_with_gates_s", "{:.1f}"),
    ]
    print(f"| {args.units_per_day:,} units/day | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for label, key, fmt in rows:
        print(f"| {label} | " + " | ".join(fmt.format(e[c][key]) for c in cols) + " |")
    print(f"\nraw results: {out}")


if __name__ == "__main__":
    main()
