"""Benchmark of the sales path, DuckDB and Postgres side by side (not a test).

    .venv/bin/python -m bench.run                    # the figures in the README
    .venv/bin/python -m bench.run --events-per-day 5000 --long-days 60 --big-day 200000   # a smoke run

(a) the nightly run's wall time with `--short-days` vs `--long-days` of history;
    the nightly cost must follow the window, not the history (ratio <= 1.2);
(b) the nightly run (load + dbt build with its gates) vs one hand-written SQL
    statement doing the same window rebuild on the same engine;
(c) loader rows/s vs the engine's own bulk load of the same files (DuckDB
    read_json, Postgres COPY), and the loader's peak memory on a --big-day day.

Postgres comes from the libpq variables (default 127.0.0.1:5432, user postgres);
each case gets a fresh database. Results go to stdout and bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from pathlib import Path

import psycopg2

from dayclose.generate import generate_sales
from dayclose.jobs import run_nightly
from dayclose.loader import load_source, load_workers
from dayclose.settings import Target, resolve_target
from dayclose.sources import SALES
from dayclose.warehouse import Warehouse

ENGINES = ("duckdb", "postgres")
RESULTS = Path(__file__).resolve().parent / "results"


@contextmanager
def fresh_target(engine: str, workdir: Path):
    """A new empty warehouse: a DuckDB file, or a Postgres database dropped afterwards."""
    os.environ["DAYCLOSE_STATE_DIR"] = str(workdir / f"state-{uuid.uuid4().hex[:6]}")
    if engine == "duckdb":
        path = workdir / f"bench-{uuid.uuid4().hex[:6]}.duckdb"
        os.environ["DAYCLOSE_DUCKDB"] = str(path)
        yield resolve_target("duckdb")
        path.unlink(missing_ok=True)
        return
    os.environ.setdefault("PGHOST", "127.0.0.1")
    os.environ.setdefault("PGUSER", "postgres")
    name = f"dayclose_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(dbname="postgres")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"create database {name}")
    os.environ["PGDATABASE"] = name
    try:
        yield resolve_target("postgres")
    finally:
        with admin.cursor() as cur:
            cur.execute(f"drop database if exists {name} with (force)")
        admin.close()


def nightly(target: Target, landing: Path, as_of: datetime) -> float:
    started = time.perf_counter()
    summary = run_nightly("sales", target, landing, as_of, quiet=True)
    seconds = time.perf_counter() - started
    if not summary.ok:
        raise SystemExit("\n".join(summary.lines()))
    return seconds


def hand_written(target: Target, as_of: datetime, window_days: int = 4) -> float:
    """The same window rebuild as one hand-written statement pair (delete, insert)."""
    end = as_of.date()
    start = end - timedelta(days=window_days)
    s, lnd = target.schema, target.landing_schema
    with Warehouse(target) as wh:
        wh.execute(
            f"create table if not exists {s}.bench_daily_sales_hand "
            "(sale_date date, shop_id varchar, sales_amount decimal(18, 2), sales_count bigint)"
        )
        started = time.perf_counter()
        with wh.transaction():
            wh.execute(
                f"delete from {s}.bench_daily_sales_hand where sale_date >= %s and sale_date < %s",
                (start, end),
            )
            wh.execute(
                f"""
                insert into {s}.bench_daily_sales_hand
                select cast(sold_at as date), shop_id, sum(amount), count(*)
                from (
                    select l.*, row_number() over (
                        partition by event_id order by received_at, batch_id, file_name, line_number
                    ) as copy_number
                    from {lnd}.sale_lines as l
                    where sold_at >= %s and sold_at < %s and batch_completed_at <= %s
                      and decode_error is null and amount >= 0 and amount <= 100000
                      and sold_at <= received_at
                      and shop_id in (select shop_id from {s}_reference.shops)
                ) as x
                where copy_number = 1
                group by 1, 2
                """,
                (
                    datetime.combine(start, datetime.min.time()),
                    datetime.combine(end, datetime.min.time()),
                    as_of,
                ),
            )
        seconds = time.perf_counter() - started
        check = wh.query(
            f"select count(*), sum(sales_amount) from {s}.bench_daily_sales_hand "
            "where sale_date >= %s and sale_date < %s",
            (start, end),
        )
        ours = wh.query(
            f"select count(*), sum(sales_amount) from {s}.daily_sales "
            "where sale_date >= %s and sale_date < %s",
            (start, end),
        )
    if check != ours:
        raise SystemExit(f"hand-written SQL and daily_sales disagree: {check} vs {ours}")
    return seconds


def case_history(engine: str, landing: Path, days: int, workdir: Path) -> dict:
    """History of `days` days built (untimed), then the next night's run, timed."""
    first = date(2026, 1, 1)
    last_night = datetime.combine(first + timedelta(days=days), datetime.min.time()) + timedelta(minutes=30)
    with fresh_target(engine, workdir) as target:
        started = time.perf_counter()
        nightly(target, landing, last_night - timedelta(days=1))  # the history, built once
        setup = time.perf_counter() - started
        run_seconds = nightly(target, landing, last_night)
        rerun = nightly(target, landing, last_night)  # nothing new to load: build + gates only
        hand = hand_written(target, last_night)
    return {"setup_s": setup, "nightly_s": run_seconds, "rerun_s": rerun, "hand_sql_s": hand}


def bulk_load(engine: str, landing: Path, workdir: Path) -> tuple[int, float]:
    """The engine's own bulk load of the same files, no checks: rows and seconds."""
    files = sorted(str(p) for p in landing.glob("sales/*/part-*.jsonl"))
    with fresh_target(engine, workdir) as target, Warehouse(target) as wh:
        started = time.perf_counter()
        if engine == "duckdb":
            wh.execute(
                "create table bulk as select * from read_json(%s, format = 'newline_delimited', "
                "columns = {event_id: 'varchar', shop_id: 'varchar', sold_at: 'varchar', "
                "received_at: 'varchar', amount: 'varchar'}, ignore_errors = true)",
                (files,),
            )
        else:
            wh.execute("create table bulk (line text)")
            with wh._conn.cursor() as cur:
                for f in files:
                    with open(f, encoding="utf-8") as fh:
                        cur.copy_expert("copy bulk (line) from stdin with (format text)", fh)
        seconds = time.perf_counter() - started
        rows = int(wh.scalar("select count(*) from bulk"))
    return rows, seconds


def loader_throughput(engine: str, landing: Path, workdir: Path) -> tuple[int, float]:
    with fresh_target(engine, workdir) as target, Warehouse(target) as wh:
        started = time.perf_counter()
        report = load_source(wh, SALES, landing, datetime(2100, 1, 1))
        return report.rows_loaded, time.perf_counter() - started


def peak_memory_child(engine: str, landing: Path, workdir: Path) -> tuple[float, float]:
    """Peak RSS (MiB) of a fresh process that loads `landing` through the loader, and of
    its largest decoding worker (the loader decodes in `load_workers()` child processes;
    ru_maxrss of the children, an upper bound: it includes the loader's size at spawn)."""
    code = (
        "import sys, resource; from pathlib import Path; from datetime import datetime;"
        "from bench.run import fresh_target; from dayclose.loader import load_source;"
        "from dayclose.sources import SALES;"
        "from dayclose.warehouse import Warehouse; from bench.memory import own_peak_mib\n"
        "if __name__ == '__main__':\n"
        f"    with fresh_target({engine!r}, Path({str(workdir)!r})) as t, Warehouse(t) as wh:\n"
        f"        r = load_source(wh, SALES, Path({str(landing)!r}), datetime(2100, 1, 1))\n"
        "    print(r.rows_loaded, own_peak_mib(),"
        " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    _rows, own_mib, child_mib = out.stdout.split()[-3:]
    return float(own_mib), float(child_mib)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events-per-day", type=int, default=100_000)
    parser.add_argument("--short-days", type=int, default=30)
    parser.add_argument("--long-days", type=int, default=360)
    parser.add_argument("--big-day", type=int, default=5_000_000, help="events of the peak-memory day")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    engines = args.engines.split(",")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="dayclose-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log = lambda m: print(f"[{datetime.now():%H:%M:%S}] {m}", flush=True)  # noqa: E731
    results: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "events_per_day": args.events_per_day,
        "engines": {},
    }
    landings = {}
    for days in (args.short_days, args.long_days):
        landings[days] = workdir / f"landing-{days}d"
        if not (landings[days] / "truth").exists():
            log(f"generating {days} days x {args.events_per_day:,} events")
            generate_sales(
                landings[days],
                date(2026, 1, 1),
                days + 1,
                shops=140,
                events_per_day=args.events_per_day,
                seed=42,
            )
    big = workdir / "landing-big-day"
    if not (big / "truth").exists():
        log(f"generating one day of {args.big_day:,} events")
        generate_sales(big, date(2026, 1, 1), 1, shops=500, events_per_day=args.big_day, seed=7)
    for engine in engines:
        r: dict = {}
        for days in (args.short_days, args.long_days):
            log(f"{engine}: nightly run with {days} days of history")
            r[f"history_{days}d"] = case_history(engine, landings[days], days, workdir)
            log(f"  {r[f'history_{days}d']}")
        r["history_ratio"] = (
            r[f"history_{args.long_days}d"]["nightly_s"] / r[f"history_{args.short_days}d"]["nightly_s"]
        )
        r["nightly_vs_hand_sql"] = (
            r[f"history_{args.long_days}d"]["nightly_s"] / r[f"history_{args.long_days}d"]["hand_sql_s"]
        )
        log(f"{engine}: loader vs bulk load on the {args.short_days}-day landing")
        rows, secs = loader_throughput(engine, landings[args.short_days], workdir)
        brows, bsecs = bulk_load(engine, landings[args.short_days], workdir)
        r["loader_rows_per_s"] = rows / secs
        r["bulk_rows_per_s"] = brows / bsecs
        log(f"{engine}: loader peak memory on a {args.big_day:,}-event day")
        r["loader_peak_mib_big_day"], r["decoder_peak_mib_big_day"] = peak_memory_child(engine, big, workdir)
        r["load_workers"] = load_workers()
        results["engines"][engine] = r
        log(f"  {json.dumps(r, default=str)}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"bench-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(results, indent=2, default=str))
    print(render(results, args))
    print(f"\nraw results: {out}")


def render(results: dict, args: argparse.Namespace) -> str:
    e = results["engines"]
    cols = list(e)
    s, lg = f"history_{args.short_days}d", f"history_{args.long_days}d"
    rows = [
        (
            f"(a) nightly run, {args.short_days} days of history (s)",
            [e[c][s]["nightly_s"] for c in cols],
            "{:.1f}",
        ),
        (
            f"(a) nightly run, {args.long_days} days of history (s)",
            [e[c][lg]["nightly_s"] for c in cols],
            "{:.1f}",
        ),
        ("(a) ratio long / short (goal <= 1.2)", [e[c]["history_ratio"] for c in cols], "{:.2f}"),
        ("(b) same window, hand-written SQL (s)", [e[c][lg]["hand_sql_s"] for c in cols], "{:.2f}"),
        (
            "(b) rerun with nothing to load: dbt build + gates (s)",
            [e[c][lg]["rerun_s"] for c in cols],
            "{:.1f}",
        ),
        ("(b) nightly run / hand-written SQL", [e[c]["nightly_vs_hand_sql"] for c in cols], "{:.1f}x"),
        ("(c) loader rows/s", [e[c]["loader_rows_per_s"] for c in cols], "{:,.0f}"),
        ("(c) engine bulk load rows/s", [e[c]["bulk_rows_per_s"] for c in cols], "{:,.0f}"),
        (
            f"(c) loader peak memory, {args.big_day:,}-event day (MiB)",
            [e[c]["loader_peak_mib_big_day"] for c in cols],
            "{:.0f}",
        ),
        (
            "(c) peak memory of each decoding worker (MiB)",
            [e[c]["decoder_peak_mib_big_day"] for c in cols],
            "{:.0f}",
        ),
        ("(c) decoding workers", [e[c]["load_workers"] for c in cols], "{}"),
    ]
    lines = [
        f"| {args.events_per_day:,} events/day | " + " | ".join(cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for label, values, fmt in rows:
        lines.append(f"| {label} | " + " | ".join(fmt.format(v) for v in values) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
