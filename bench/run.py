"""Benchmark of the sales path, DuckDB and Postgres side by side (not a test).

    .venv/bin/python -m bench.run        # the full run (about 60 min; the first time 10 more to generate)
    .venv/bin/python -m bench.run --events-per-day 3000 --short-days 10 --long-days 30 \\
        --big-days 20000,100000 --nights 1                                  # smoke: under 2 minutes
    .venv/bin/python -m bench.run --cases loader,memory --engines duckdb     # some cases, one engine

(a) history ratio: the nightly run (lock, load the night's 24 batches, dbt build with every
    model and gate, publish) with --long-days of history against --short-days; the cost must
    follow the window, not the history (goal <= 1.2). Each landing's history is built once
    (untimed), then --nights consecutive nights of each are timed, the two cases taking
    turns night by night (the mean is the figure).
(b) the nightly run against the same window rebuilt by one hand-written statement from the
    raw lines (bench/handwritten.py: decode by the contract, validate, first arrival,
    aggregate per shop and day), checked equal to daily_sales.
(c) loader lines/s (sha256 and cleanliness pre-pass, then the engine reads the lines) against
    the engine's bare bulk load of the same files, no checks: DuckDB read_csv of one text
    column (read_json for reference), Postgres COPY of whole lines (goal: loader >= 0.5x).
(d) peak memory (VmHWM) of a child process that loads one day of --big-days events through
    the loader: flat in the size of the day (DuckDB runs inside it; Postgres in the server).
(e) a corrected batch: a night that loads a batch of 200,000 sales, then the night after it came
    again with a new manifest (150,000 of its ids at another amount, 1,000 new, the rest gone),
    which re-registers its sales' first arrivals (on Postgres without nested loops, whatever
    the statistics: int_<entity>s_deduplicated's pre_hook).

Data under /work/bench-data (DAYCLOSE_BENCH_DATA); Postgres from the libpq variables (default
127.0.0.1:5432, user postgres), a fresh database per case. Raw results: bench/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
from datetime import date, datetime, timedelta
from pathlib import Path

from bench.common import (
    DATA,
    ENGINES,
    Timer,
    dbt_log_status,
    fresh_target,
    landing_files,
    load_average,
    log,
    machine,
    node_seconds,
    sales_landing,
    table,
    ticking,
    top_nodes,
    write_results,
)
from bench.handwritten import differences, run_statement, sales_sql

FIRST_DAY = date(2026, 1, 1)
WINDOW_DAYS = 4
MAX_SALE_AMOUNT = 100000
DUCKDB_LINES = (
    "columns = {'line': 'VARCHAR'}, header = false, delim = e'\\x01', quote = '', escape = '', "
    "auto_detect = false, new_line = '\\n', max_line_size = 20000000"
)
POSTGRES_COPY = "copy bulk (line) from stdin with (format csv, delimiter e'\\x01', quote e'\\x02')"


def nightly(target, landing: Path, as_of: datetime, what: str) -> dict:
    """One nightly run of sales as of `as_of`, timed, with its steps and dbt nodes."""
    from dayclose.jobs import run_nightly

    clock = Timer()
    with ticking(what, every=15, status=dbt_log_status(target.state_dir)):
        summary = run_nightly("sales", target, landing, as_of, quiet=True)
    seconds = clock.seconds
    if not summary.ok:
        raise SystemExit("\n".join(summary.lines()))
    return {
        "as_of": as_of,
        "seconds": seconds,
        "load": round(load_average(), 2),
        "lines_loaded": summary.load.rows_loaded,
        "batches_loaded": len(summary.load.loaded),
        "steps": {k: round(v, 3) for k, v in summary.step_seconds.items()},
        "nodes": node_seconds(summary.build),
    }


def hand_written(target, as_of: datetime) -> dict:
    """The window of the run as of `as_of` as one hand-written statement from the raw lines."""
    from dayclose.warehouse import Warehouse

    end = as_of.date()
    start = end - timedelta(days=WINDOW_DAYS)
    s = target.schema
    with Warehouse(target) as wh:
        sql = sales_sql(wh.kind, s, "bench_daily_sales_hand", start, end, as_of, MAX_SALE_AMOUNT)
        seconds = run_statement(wh, "bench_daily_sales_hand", sql)
        diff = differences(
            wh,
            f"{s}.bench_daily_sales_hand",
            f"{s}.daily_sales",
            ["sale_date", "shop_id", "sales_amount", "sales_count"],
            "sale_date",
            start,
            end,
        )
        rows = wh.scalar(f"select count(*) from {s}.bench_daily_sales_hand")
    if diff:
        raise SystemExit(f"hand-written statement and daily_sales differ in {diff} rows ({start} .. {end})")
    return {"seconds": seconds, "rows": rows, "equal_to_daily_sales": True, "load": round(load_average(), 2)}


TARGET_ENV = ("DAYCLOSE_STATE_DIR", "DAYCLOSE_DUCKDB", "PGDATABASE")  # what fresh_target sets


def case_histories(engine: str, landings: dict[int, Path], nights: int, workdir: Path) -> dict[int, dict]:
    """Each history of `landings` ({days: landing}) built (untimed), then `nights` nights of
    each timed, the cases taking turns night by night (30, 360, 30, 360), so that a machine
    that speeds up or slows down during the run weighs on every case alike; then each case's
    rerun and hand-written statement, also in turn."""
    with contextlib.ExitStack() as stack:
        cases: dict[int, dict] = {}
        for days, landing in landings.items():
            target = stack.enter_context(fresh_target(engine, workdir))
            last = datetime.combine(FIRST_DAY + timedelta(days=days), datetime.min.time()) + timedelta(
                minutes=30
            )
            cases[days] = {
                "target": target,
                "env": {k: os.environ[k] for k in TARGET_ENV if k in os.environ},
                "landing": landing,
                "last_night": last,
                "first_timed": last - timedelta(days=nights - 1),
                "nights": [],
            }

        def night(days: int, as_of: datetime, what: str) -> dict:
            c = cases[days]
            os.environ.update(c["env"])  # the target's warehouse and state folder
            return nightly(c["target"], c["landing"], as_of, what)

        for days, c in cases.items():
            log(f"{engine}: building {days - nights} days of history (untimed)")
            c["setup"] = night(days, c["first_timed"] - timedelta(days=1), f"{engine} history build")
            log(f"  history built in {c['setup']['seconds']:.1f} s ({c['setup']['lines_loaded']:,} lines)")
        for n in range(nights):
            for days, c in cases.items():
                as_of = c["first_timed"] + timedelta(days=n)
                r = night(days, as_of, f"{engine} nightly {as_of:%Y-%m-%d}")
                c["nights"].append(r)
                log(
                    f"  nightly as of {as_of:%Y-%m-%d %H:%M}, {days} days of history: {r['seconds']:.2f} s "
                    f"(load {r['steps'].get('load', 0):.2f}, build {r['steps'].get('build', 0):.2f}, "
                    f"publish {r['steps'].get('publish', 0):.2f}; {r['lines_loaded']:,} lines)"
                )
        out = {}
        for days, c in cases.items():
            rerun = night(days, c["last_night"], f"{engine} rerun")
            log(
                f"  {days} days: rerun, nothing to load: {rerun['seconds']:.2f} s; "
                f"top nodes: {top_nodes(rerun['nodes'], 5)}"
            )
            hand = hand_written(c["target"], c["last_night"])
            log(
                f"  {days} days: hand-written statement from the raw lines: {hand['seconds']:.2f} s "
                "(equal to daily_sales)"
            )
            mean = sum(r["seconds"] for r in c["nights"]) / len(c["nights"])
            out[days] = {
                "days": days,
                "history_build": c["setup"],
                "nights": c["nights"],
                "nightly_s": mean,
                "rerun": rerun,
                "rerun_s": rerun["seconds"],
                "hand": hand,
                "hand_sql_s": hand["seconds"],
            }
        return out


def bulk_load(engine: str, landing: Path, workdir: Path) -> dict:
    """The engine's bare bulk load of the same files, no checks: lines and seconds."""
    from dayclose.warehouse import Warehouse

    files = landing_files(landing, "sales")
    out: dict = {"files": len(files)}
    with fresh_target(engine, workdir) as target, Warehouse(target) as wh:
        if engine == "duckdb":
            clock = Timer()
            wh.execute(f"create table bulk as select line from read_csv(?, {DUCKDB_LINES})", (files,))
            out["read_csv_s"] = clock.seconds
            out["lines"] = int(wh.scalar("select count(*) from bulk"))
            clock = Timer()
            wh.execute(
                "create table bulk_json as select * from read_json(?, format = 'newline_delimited', "
                "columns = {event_id: 'varchar', shop_id: 'varchar', sold_at: 'varchar', "
                "received_at: 'varchar', amount: 'varchar'}, ignore_errors = true)",
                (files,),
            )
            out["read_json_s"] = clock.seconds
            out["read_json_rows"] = int(wh.scalar("select count(*) from bulk_json"))
            out["seconds"] = out["read_csv_s"]
        else:
            wh.execute("create table bulk (line text)")
            clock = Timer()
            with wh.transaction():
                for f in files:
                    with open(f, "rb") as fh:
                        wh.copy_from(POSTGRES_COPY, fh)
            out["seconds"] = clock.seconds
            out["lines"] = int(wh.scalar("select count(*) from bulk"))
    out["lines_per_s"] = out["lines"] / out["seconds"]
    if "read_json_s" in out:
        out["read_json_rows_per_s"] = out["read_json_rows"] / out["read_json_s"]
    out["load"] = round(load_average(), 2)
    return out


def loader_throughput(engine: str, landing: Path, workdir: Path) -> dict:
    from dayclose.loader import load_source
    from dayclose.sources import source
    from dayclose.warehouse import Warehouse

    with fresh_target(engine, workdir) as target, Warehouse(target) as wh:
        clock = Timer()
        report = load_source(
            wh, source("sales"), landing, datetime(2100, 1, 1), progress=lambda m: log("  " + m)
        )
        seconds = clock.seconds
    return {
        "seconds": seconds,
        "lines": report.rows_loaded,
        "batches": len(report.loaded),
        "lines_per_s": report.rows_loaded / seconds,
        "load": round(load_average(), 2),
    }


MEMORY_CHILD = """
import json, sys, time
from datetime import datetime
from pathlib import Path
from bench.common import fresh_target
from bench.memory import own_peak_mib
from dayclose.loader import load_source
from dayclose.sources import source
from dayclose.warehouse import Warehouse

if __name__ == '__main__':
    engine, landing, workdir = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    with fresh_target(engine, workdir) as t:
        with Warehouse(t) as wh:
            started = time.perf_counter()
            r = load_source(wh, source("sales"), landing, datetime(2100, 1, 1),
                            progress=lambda m: print('progress', m, flush=True))
            seconds = time.perf_counter() - started
        size = t.duckdb_path.stat().st_size if t.duckdb_path else None
    print(json.dumps({"lines": r.rows_loaded, "seconds": seconds, "peak_mib": own_peak_mib(),
                      "duckdb_file_bytes": size}))
"""


def peak_memory_child(engine: str, landing: Path, workdir: Path) -> dict:
    """Peak resident memory (VmHWM, MiB) of a fresh process loading `landing` through the loader."""
    proc = subprocess.Popen(
        [sys.executable, "-c", MEMORY_CHILD, engine, str(landing), str(workdir)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    last = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("progress "):
            log("  " + line[len("progress ") :].strip())
        elif line.strip():
            last = line.strip()
    if proc.wait() != 0:
        raise SystemExit(f"peak-memory child failed ({engine}, {landing})")
    out = json.loads(last)
    out["lines_per_s"] = out["lines"] / out["seconds"]
    out["load"] = round(load_average(), 2)
    return out


def corrected_lines(ids: range, cents: int) -> bytes:
    """Sales of shops S-001..S-140 on 2026-01-07, received in the batch's hour."""
    return "".join(
        json.dumps(
            {
                "event_id": f"big-{i}",
                "shop_id": f"S-{1 + i % 140:03d}",
                "sold_at": f"2026-01-07T09:{i // 60 % 60:02d}:{i % 60:02d}Z",
                "received_at": "2026-01-07T10:30:00Z",
                "amount": f"{(i % 9000 + cents) / 100:.2f}",
            }
        )
        + "\n"
        for i in ids
    ).encode()


def case_corrected(engine: str, per_day: int, workdir: Path) -> dict:
    """(e) A week of history, a night with a 200,000-line batch, then the night after that batch
    came again with a new manifest; both nights timed."""
    import hashlib

    from dayclose.generate import generate_sales

    landing = workdir / f"corrected-{engine}"
    shutil.rmtree(landing, ignore_errors=True)
    generate_sales(landing, FIRST_DAY, 7, shops=140, events_per_day=per_day, seed=11)
    folder = landing / "sales" / "arrived=2026-01-07T10"

    def deliver(blob: bytes) -> None:
        (folder / "part-9999.jsonl").write_bytes(blob)
        manifest = json.loads((folder / "_SUCCESS").read_text())
        entry = {
            "name": "part-9999.jsonl",
            "rows": blob.count(b"\n"),
            "sha256": hashlib.sha256(blob).hexdigest(),
        }
        manifest["files"] = [f for f in manifest["files"] if f["name"] != entry["name"]] + [entry]
        (folder / "_SUCCESS").write_text(json.dumps(manifest))

    night = datetime(2026, 1, 8, 0, 30)
    with fresh_target(engine, workdir) as target:
        nightly(target, landing, night - timedelta(days=1), f"{engine} corrected: history")
        deliver(corrected_lines(range(200_000), 100))
        first = nightly(target, landing, night, f"{engine} corrected: the 200,000-line batch")
        deliver(corrected_lines(range(150_000), 250) + corrected_lines(range(200_000, 201_000), 100))
        again = nightly(target, landing, night + timedelta(minutes=15), f"{engine} corrected: the correction")
    shutil.rmtree(landing, ignore_errors=True)
    log(
        f"  {engine}: night with the 200,000-line batch {first['seconds']:.1f} s; the night after its "
        f"correction {again['seconds']:.1f} s (top nodes: {top_nodes(again['nodes'], 3)})"
    )
    return {"batch_night": first, "correction_night": again}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events-per-day", type=int, default=100_000)
    parser.add_argument("--short-days", type=int, default=30)
    parser.add_argument("--long-days", type=int, default=360)
    parser.add_argument("--nights", type=int, default=2, help="consecutive nights timed per history")
    parser.add_argument("--big-days", default="5000000,50000000", help="events of the peak-memory days")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument(
        "--cases",
        default="history,loader,memory,corrected",
        help="history (a, b), loader (c), memory (d), corrected (e)",
    )
    parser.add_argument("--workdir", default=str(DATA / "work"))
    args = parser.parse_args()
    engines = args.engines.split(",")
    cases = set(args.cases.split(","))
    big_days = [int(x) for x in args.big_days.split(",") if x]
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict = {"machine": machine(), "args": vars(args), "engines": {e: {} for e in engines}}
    log(f"bench.run: {json.dumps(vars(args))}")
    landings = {}
    if cases & {"history", "loader"}:
        # the loader case reads the short landing only; the long one is for the history case
        for days in (args.short_days, args.long_days) if "history" in cases else (args.short_days,):
            landings[days] = sales_landing(days + 1, args.events_per_day)
    big = {n: sales_landing(1, n, seed=7, shops=500) for n in big_days} if "memory" in cases else {}
    for engine in engines:
        r = results["engines"][engine]
        if "history" in cases:
            log(f"{engine}: (a, b) nightly with {args.short_days} and {args.long_days} days of history")
            histories = case_histories(
                engine, {d: landings[d] for d in (args.short_days, args.long_days)}, args.nights, workdir
            )
            for days, history in histories.items():
                r[f"history_{days}d"] = history
            short, long = r[f"history_{args.short_days}d"], r[f"history_{args.long_days}d"]
            r["history_ratio"] = long["nightly_s"] / short["nightly_s"]
            r["nightly_vs_hand_sql"] = long["nightly_s"] / long["hand_sql_s"]
            r["rerun_vs_hand_sql"] = long["rerun_s"] / long["hand_sql_s"]
            log(
                f"{engine}: history ratio {r['history_ratio']:.2f}, "
                f"nightly / hand SQL {r['nightly_vs_hand_sql']:.1f}x"
            )
            write_results("bench-sales-partial", results)
        if "loader" in cases:
            landing = landings[args.short_days]
            log(f"{engine}: (c) loader on the {args.short_days + 1}-day landing")
            r["loader"] = loader_throughput(engine, landing, workdir)
            log(
                f"  loader: {r['loader']['lines']:,} lines in {r['loader']['seconds']:.1f} s, "
                f"{r['loader']['lines_per_s']:,.0f} lines/s"
            )
            log(f"{engine}: (c) bare bulk load of the same files")
            r["bulk"] = bulk_load(engine, landing, workdir)
            log(
                f"  bare bulk load: {r['bulk']['lines']:,} lines in {r['bulk']['seconds']:.1f} s, "
                f"{r['bulk']['lines_per_s']:,.0f} lines/s"
            )
            r["loader_vs_bulk"] = r["loader"]["lines_per_s"] / r["bulk"]["lines_per_s"]
            write_results("bench-sales-partial", results)
        if "memory" in cases:
            r["memory"] = {}
            for n, landing in big.items():
                log(f"{engine}: (d) peak memory of the loading process, one day of {n:,} events")
                with ticking(f"{engine} loading {n:,} events", every=30):
                    m = peak_memory_child(engine, landing, workdir)
                r["memory"][str(n)] = m
                log(f"  {m['lines']:,} lines in {m['seconds']:.1f} s: peak {m['peak_mib']:,.0f} MiB")
                write_results("bench-sales-partial", results)
        if "corrected" in cases:
            log(f"{engine}: (e) a 200,000-line batch, then its correction")
            r["corrected"] = case_corrected(engine, args.events_per_day, workdir)
        write_results("bench-sales-partial", results)
    results["machine"]["load_at_end"] = load_average()
    out = write_results("bench-sales", results)
    print(render(results, args, big_days))
    print(f"\nraw results: {out}")


def render(results: dict, args: argparse.Namespace, big_days: list[int]) -> str:
    e = results["engines"]
    cols = list(e)

    def get(c: str, *path):
        v = e[c]
        for p in path:
            if not isinstance(v, dict) or p not in v:
                return None
            v = v[p]
        return v

    s, lg = f"history_{args.short_days}d", f"history_{args.long_days}d"
    rows = [
        (
            f"(a) nightly run, {args.short_days} days of history (s)",
            [get(c, s, "nightly_s") for c in cols],
            "{:.2f}",
        ),
        (
            f"(a) nightly run, {args.long_days} days of history (s)",
            [get(c, lg, "nightly_s") for c in cols],
            "{:.2f}",
        ),
        ("(a) ratio (goal <= 1.2)", [get(c, "history_ratio") for c in cols], "{:.2f}"),
        (
            "(b) rerun, nothing to load: build + gates + publish (s)",
            [get(c, lg, "rerun_s") for c in cols],
            "{:.2f}",
        ),
        (
            "(b) hand-written statement from the raw lines (s)",
            [get(c, lg, "hand_sql_s") for c in cols],
            "{:.2f}",
        ),
        ("(b) nightly run / hand-written", [get(c, "nightly_vs_hand_sql") for c in cols], "{:.1f}x"),
        ("(c) loader, lines/s", [get(c, "loader", "lines_per_s") for c in cols], "{:,.0f}"),
        ("(c) bare bulk load, lines/s", [get(c, "bulk", "lines_per_s") for c in cols], "{:,.0f}"),
        (
            "(c) DuckDB read_json, rows/s (reference)",
            [get(c, "bulk", "read_json_rows_per_s") for c in cols],
            "{:,.0f}",
        ),
        ("(c) loader / bare bulk load (goal >= 0.5)", [get(c, "loader_vs_bulk") for c in cols], "{:.2f}"),
    ]
    for n in big_days:
        rows.append(
            (
                f"(d) peak memory of the loading process, {n:,} events/day (MiB)",
                [get(c, "memory", str(n), "peak_mib") for c in cols],
                "{:,.0f}",
            )
        )
    rows += [
        (
            "(e) night loading a 200,000-line batch (s)",
            [get(c, "corrected", "batch_night", "seconds") for c in cols],
            "{:.1f}",
        ),
        (
            "(e) the night after its correction with a new manifest (s)",
            [get(c, "corrected", "correction_night", "seconds") for c in cols],
            "{:.1f}",
        ),
    ]
    return table([f"sales, {args.events_per_day:,} events/day"] + cols, rows)


if __name__ == "__main__":
    main()
