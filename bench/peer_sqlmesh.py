"""dayclose against a peer, SQLMesh, on the same sales landing and machine (not a test).

    .venv/bin/python -m bench.peer_sqlmesh                        # 30 and 120 days at 100,000 sales a day
    .venv/bin/python -m bench.peer_sqlmesh --days 5 --events-per-day 3000 --repeat 1  # smoke, 2 minutes

SQLMesh is installed from PyPI into its own venv (--sqlmesh-venv, default
/work/bench-data/sqlmesh-venv; created with `pip install "sqlmesh==0.236.*"` if missing), so the
project's dependencies stay untouched. Its project is generated at bench time under
/work/bench-data/peer/ (never in the repository): one DuckDB model, incremental by time range on
the sale day with a 4-day lookback, that reads the landing's lines as text (read_csv of one
column with a delimiter and quote that cannot occur, hive partition `arrived` pruned to the
batches arrived since the interval's start and complete by the execution time), decodes them
with json_valid / json_extract_string, validates them as dayclose does (known shop, amount
0..100000 with the decimal cast, sold before received), keeps each sale once at its first
arrival (event_id, ordered by arrival) and sums per shop and day; three audits (not_null,
unique_combination_of_columns on the grain, accepted_range of the amount); shops a seed.

For each landing of N days (N + 1 generated): a first build as of day N + 1 00:30 (dayclose: a
fresh warehouse, `dayclose run sales`: load N days, build, gates, publish; SQLMesh: `plan`
backfilling every day), then the next night (dayclose: `dayclose run sales`, load the night's
batches, build the window, gates, publish; SQLMesh: `run`). Each first build starts with no
state of its tool's (dayclose: a new state folder, so dbt parses the project in full; SQLMesh: a
new project and cache). Each is timed as a command an operator
runs (a child process: interpreter start-up included for both), after one untimed import of
each tool (the same warm page cache for both). After each step both
daily_sales are compared row for row over every day (they must be equal). --repeat rounds
(default 3) of the four steps, each from scratch, the tools taking turns: a shared machine's
speed moves between runs minutes apart, so the medians count and the table shows every round.
Goals: first build within 2x of SQLMesh's, nightly within 1.5x.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
from datetime import date, datetime, timedelta
from pathlib import Path

from bench.common import (
    DATA,
    Timer,
    fresh_target,
    load_average,
    log,
    machine,
    sales_landing,
    table,
    ticking,
    write_results,
)

FIRST_DAY = date(2026, 1, 1)
REPO = Path(__file__).resolve().parent.parent
SQLMESH_SPEC = "sqlmesh==0.236.*"

MODEL = """
MODEL (
  name bench.daily_sales,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column sale_date,
    lookback 4
  ),
  start '{start}',
  cron '@daily',
  grain (sale_date, shop_id),
  audits (
    not_null(columns := (sale_date, shop_id, sales_amount, sales_count)),
    unique_combination_of_columns(columns := (sale_date, shop_id)),
    accepted_range(column := sales_amount, min_v := 0)
  )
);

WITH lines AS (
  SELECT line, arrived, filename
  FROM read_csv(
    '{landing}/sales/*/part-*.jsonl',
    columns = {{'line': 'VARCHAR'}}, header = false, delim = '\x01', quote = '', escape = '',
    auto_detect = false, max_line_size = 20000000,
    hive_partitioning = true, hive_types = {{'arrived': 'VARCHAR'}}, filename = true
  )
  WHERE arrived >= strftime(@start_ts::TIMESTAMP, '%Y-%m-%dT%H')
    AND arrived <= strftime(@execution_ts::TIMESTAMP - INTERVAL 1 HOUR, '%Y-%m-%dT%H')
), decoded AS (
  SELECT
    arrived,
    filename,
    json_extract_string(line, '$.event_id') AS event_id,
    json_extract_string(line, '$.shop_id') AS shop_id,
    TRY_CAST(
      TRY_CAST(json_extract_string(line, '$.sold_at') AS TIMESTAMPTZ) AT TIME ZONE 'UTC' AS TIMESTAMP
    ) AS sold_at,
    TRY_CAST(
      TRY_CAST(json_extract_string(line, '$.received_at') AS TIMESTAMPTZ) AT TIME ZONE 'UTC' AS TIMESTAMP
    ) AS received_at,
    TRY_CAST(json_extract_string(line, '$.amount') AS DECIMAL(18, 2)) AS amount
  FROM lines
  WHERE json_valid(line)
), valid AS (
  SELECT decoded.*
  FROM decoded
  JOIN bench.shops AS shops ON decoded.shop_id = shops.shop_id
  WHERE decoded.event_id IS NOT NULL
    AND decoded.sold_at IS NOT NULL
    AND decoded.received_at IS NOT NULL
    AND decoded.amount BETWEEN 0 AND 100000
    AND decoded.sold_at <= decoded.received_at
), first_arrivals AS (
  SELECT *
  FROM valid
  QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY arrived, received_at, filename) = 1
)
SELECT
  CAST(sold_at AS DATE) AS sale_date,
  shop_id,
  CAST(SUM(amount) AS DECIMAL(18, 2)) AS sales_amount,
  COUNT(*) AS sales_count
FROM first_arrivals
WHERE CAST(sold_at AS DATE) BETWEEN @start_ds AND @end_ds
GROUP BY 1, 2
"""

SEED = """
MODEL (
  name bench.shops,
  kind SEED (path '{shops}'),
  columns (shop_id TEXT, shop_name TEXT, region TEXT, opened_on DATE),
  grain (shop_id)
);
"""

CONFIG = """
gateways:
  local:
    connection:
      type: duckdb
      database: {database}
default_gateway: local
model_defaults:
  dialect: duckdb
  start: '{start}'
"""

DRIVER = """
import json, sys, time
started = time.perf_counter()
from sqlmesh import Context
mode, path, execution_time, export = sys.argv[1:5]
ctx = Context(paths=path)
if mode == "plan":
    ctx.plan(auto_apply=True, no_prompts=True, execution_time=execution_time)
else:
    ok = ctx.run(execution_time=execution_time)
    assert ok, "sqlmesh run failed"
ctx.engine_adapter.execute(f"copy (select * from bench.daily_sales) to '{export}' (format parquet)")
ctx.close()
import sqlmesh, duckdb
elapsed = time.perf_counter() - started
print(json.dumps({"inner_s": elapsed, "sqlmesh": sqlmesh.__version__, "duckdb": duckdb.__version__}))
"""


def ensure_sqlmesh(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        log(f"installing {SQLMESH_SPEC} into {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", SQLMESH_SPEC], check=True)
    return python


def warm_up(python: Path) -> dict:
    """Import each tool once, untimed, so that both timed commands start from the same warm
    page cache (the first import after an install reads thousands of files from disk: it
    made SQLMesh's first plan half again as long)."""
    seconds = {}
    for name, interpreter, module in (
        ("sqlmesh", python, "sqlmesh"),
        ("dayclose", Path(sys.executable), "dbt.cli.main"),
    ):
        clock = Timer()
        subprocess.run([str(interpreter), "-c", f"import {module}"], check=True)
        seconds[name] = round(clock.seconds, 2)
    log(f"warm-up imports (untimed): {seconds}")
    return seconds


def write_project(folder: Path, landing: Path) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "models").mkdir(parents=True)
    (folder / "config.yaml").write_text(
        CONFIG.format(database=folder / "peer.duckdb", start=FIRST_DAY.isoformat())
    )
    (folder / "models" / "daily_sales.sql").write_text(
        MODEL.format(start=FIRST_DAY.isoformat(), landing=landing)
    )
    (folder / "models" / "shops.sql").write_text(SEED.format(shops=REPO / "seeds" / "shops.csv"))
    (folder / "driver.py").write_text(DRIVER)
    return folder


def sqlmesh_step(python: Path, project: Path, mode: str, execution_time: datetime, export: Path) -> dict:
    clock = Timer()
    with ticking(f"sqlmesh {mode}", every=15):
        done = subprocess.run(
            [
                str(python),
                str(project / "driver.py"),
                mode,
                str(project),
                f"{execution_time:%Y-%m-%d %H:%M:%S}",
                str(export),
            ],
            capture_output=True,
            text=True,
            cwd=project,
        )
    seconds = clock.seconds
    if done.returncode != 0:
        raise SystemExit(f"sqlmesh {mode} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out.update(seconds=seconds, load=round(load_average(), 2))
    return out


def dayclose_step(landing: Path, as_of: datetime) -> dict:
    clock = Timer()
    with ticking("dayclose run", every=15):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "dayclose.cli",
                "run",
                "sales",
                "--as-of",
                f"{as_of:%Y-%m-%dT%H:%M}",
                "--landing",
                str(landing),
                "--target",
                "duckdb",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
    seconds = clock.seconds
    if done.returncode != 0:
        raise SystemExit(f"dayclose run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return {
        "seconds": seconds,
        "load": round(load_average(), 2),
        "summary": done.stdout.strip().splitlines()[:3],
        "slowest_dbt_nodes": slowest_nodes(),
    }


def slowest_nodes(n: int = 8) -> list[tuple[str, float]]:
    """The run's slowest dbt nodes (its run_results.json, in the state folder fresh_target set)."""
    [path] = Path(os.environ["DAYCLOSE_STATE_DIR"]).glob("*/target/run_results.json")
    results = json.loads(path.read_text())["results"]
    nodes = [(r["unique_id"].split(".")[2], round(r["execution_time"], 2)) for r in results]
    return sorted(nodes, key=lambda node: -node[1])[:n]


def compare(duckdb_path: Path, export: Path) -> dict:
    import duckdb

    con = duckdb.connect(str(duckdb_path), read_only=True)
    cols = (
        "sale_date, shop_id, cast(sales_amount as decimal(18, 2)) as sales_amount, "
        "cast(sales_count as bigint) as sales_count"
    )
    ours = f"select {cols} from main.daily_sales"
    peer = f"select {cols} from read_parquet('{export}')"
    diff = con.execute(
        f"select count(*) from (({ours} except {peer}) union all ({peer} except {ours}))"
    ).fetchone()[0]
    rows, days, total = con.execute(
        f"select count(*), count(distinct sale_date), sum(sales_amount) from ({ours})"
    ).fetchone()
    peer_rows = con.execute(f"select count(*) from ({peer})").fetchone()[0]
    con.close()
    return {"differences": diff, "rows": rows, "peer_rows": peer_rows, "days": days, "total": str(total)}


STEPS = ("sqlmesh_first", "sqlmesh_nightly", "dayclose_first", "dayclose_nightly")
COMPARED = ("first", "nightly")  # dayclose's steps after which daily_sales is compared


def case(days: int, per_day: int, python: Path, workdir: Path, repeat: int) -> dict:
    """`repeat` rounds of the four timed steps, the tools taking turns; the medians count."""
    landing = sales_landing(days + 1, per_day)
    r: dict = {"days": days, "events_per_day": per_day, "landing": str(landing), "rounds": []}
    for n in range(1, repeat + 1):
        log(f"{days} days, round {n} of {repeat}")
        r["rounds"].append(one_round(days, landing, python, workdir))
    for step in STEPS:
        times = [one[step]["seconds"] for one in r["rounds"]]
        r[step] = {"seconds": statistics.median(times), "all": times}
    for step in COMPARED:
        r[f"equal_after_{step}"] = r["rounds"][-1][f"equal_after_{step}"]
    r["sqlmesh"] = r["rounds"][0]["sqlmesh_first"].get("sqlmesh")
    r["sqlmesh_duckdb"] = r["rounds"][0]["sqlmesh_first"].get("duckdb")
    r["first_ratio"] = r["dayclose_first"]["seconds"] / r["sqlmesh_first"]["seconds"]
    r["nightly_ratio"] = r["dayclose_nightly"]["seconds"] / r["sqlmesh_nightly"]["seconds"]
    return r


def one_round(days: int, landing: Path, python: Path, workdir: Path) -> dict:
    """A first build and the next night by each tool, from scratch; daily_sales compared."""
    first_as_of = datetime.combine(FIRST_DAY + timedelta(days=days), datetime.min.time()) + timedelta(
        minutes=30
    )
    night_as_of = first_as_of + timedelta(days=1)
    project = write_project(DATA / "peer" / f"sqlmesh-{landing.name}", landing)
    export = project / "daily_sales.parquet"
    r: dict = {"project": str(project)}
    log(f"SQLMesh: first build of {days} days (plan as of {first_as_of})")
    r["sqlmesh_first"] = sqlmesh_step(python, project, "plan", first_as_of, export)
    log(f"  {r['sqlmesh_first']['seconds']:.1f} s")
    sqlmesh_first_export = export.with_name("first.parquet")
    shutil.copyfile(export, sqlmesh_first_export)
    log(f"SQLMesh: nightly run as of {night_as_of}")
    r["sqlmesh_nightly"] = sqlmesh_step(python, project, "run", night_as_of, export)
    log(f"  {r['sqlmesh_nightly']['seconds']:.1f} s")
    with fresh_target("duckdb", workdir) as target:
        log(f"dayclose: first build of {days} days (run as of {first_as_of}, fresh warehouse and state)")
        r["dayclose_first"] = dayclose_step(landing, first_as_of)
        log(f"  {r['dayclose_first']['seconds']:.1f} s; slowest: {r['dayclose_first']['slowest_dbt_nodes']}")
        r["equal_after_first"] = compare(target.duckdb_path, sqlmesh_first_export)
        log(f"  daily_sales after the first build: {r['equal_after_first']}")
        log(f"dayclose: nightly run as of {night_as_of}")
        r["dayclose_nightly"] = dayclose_step(landing, night_as_of)
        night = r["dayclose_nightly"]
        log(f"  {night['seconds']:.1f} s; slowest: {night['slowest_dbt_nodes']}")
        r["equal_after_nightly"] = compare(target.duckdb_path, export)
        log(f"  daily_sales after the nightly run: {r['equal_after_nightly']}")
    for step in COMPARED:
        if r[f"equal_after_{step}"]["differences"]:
            raise SystemExit(
                f"dayclose and SQLMesh daily_sales differ after the {step} step: {r[f'equal_after_{step}']}"
            )
    return r


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", default="30,120", help="landings of N days of history")
    parser.add_argument("--events-per-day", type=int, default=100_000)
    parser.add_argument("--sqlmesh-venv", default=str(DATA / "sqlmesh-venv"))
    parser.add_argument("--workdir", default=str(DATA / "work"))
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds per landing; the median of each step counts"
    )
    args = parser.parse_args()
    os.environ.pop("DAYCLOSE_TARGET", None)
    log(f"bench.peer_sqlmesh: {json.dumps(vars(args))}")
    python = ensure_sqlmesh(Path(args.sqlmesh_venv))
    results: dict = {"machine": machine(), "args": vars(args), "cases": {}, "warm_up_s": warm_up(python)}
    for days in [int(d) for d in args.days.split(",")]:
        results["cases"][str(days)] = case(days, args.events_per_day, python, Path(args.workdir), args.repeat)
        write_results("bench-peer-partial", results)
    results["machine"]["load_at_end"] = load_average()
    first = next(iter(results["cases"].values()))
    results["machine"]["sqlmesh"] = first["sqlmesh"]
    results["machine"]["sqlmesh_duckdb"] = first["sqlmesh_duckdb"]
    out = write_results("bench-peer", results)
    print(render(results))
    print(f"\nraw results: {out}")


def render(results: dict) -> str:
    """The comparison table (also `bench.figures`'s); a step or ratio an older file lacks shows -."""
    c = results["cases"]
    cols = list(c)

    def seconds(step: str) -> list[str]:
        # the median, then every round's time
        return [
            f"{c[k][step]['seconds']:.1f} ({', '.join(f'{t:.1f}' for t in c[k][step].get('all', []))})"
            if step in c[k]
            else "-"
            for k in cols
        ]

    def ratio(key: str) -> list[str]:
        return [f"{c[k][key]:.2f}" if key in c[k] else "-" for k in cols]

    rows = [
        ("SQLMesh first build (plan, backfill every day) (s)", seconds("sqlmesh_first")),
        ("dayclose first build (load, build, gates, publish) (s)", seconds("dayclose_first")),
        ("first build dayclose / SQLMesh (goal <= 2)", ratio("first_ratio")),
        ("SQLMesh nightly run (s)", seconds("sqlmesh_nightly")),
        ("dayclose nightly run (load, build, gates, publish) (s)", seconds("dayclose_nightly")),
        ("nightly dayclose / SQLMesh (goal <= 1.5)", ratio("nightly_ratio")),
        (
            "daily_sales rows compared, differences",
            [
                f"{c[k]['equal_after_nightly']['rows']:,}, {c[k]['equal_after_nightly']['differences']}"
                for k in cols
            ],
        ),
    ]
    return table(
        ["same landing, " + textwrap.shorten(f"{results['args']['events_per_day']:,} sales/day", 40)]
        + [f"{k} days: median (each round)" for k in cols],
        [(name, values, "{}") for name, values in rows],
    )


if __name__ == "__main__":
    main()
