"""Benchmark of the units night on Apache Spark beside DuckDB, on the same landing (not a test).

    .venv/bin/python -m bench.spark                              # 10 M units a day (the full run)
    .venv/bin/python -m bench.spark --units-per-day 200000       # smoke: a few minutes

Two days of production (the units window) with the generator's replays, retries, duplicates and
garbage are landed once; then each case runs in a process of its own (a process's Spark has one
master, fixed when its JVM starts), in a fresh warehouse: DuckDB, Spark `local[1]`, Spark
`local[2]`. Each case loads the window (the loader: manifest, line counts and sha256, then the
engine reads the files), then runs the night (lock, dbt build of every units and shared model and
gate, publish); the published daily_good_units of every case must equal DuckDB's. Measured: the
seconds of each step, lines per second and per core, the peak memory of the case's processes (the
JVM included, sampled every 0.2 s) and the cores they used (their CPU seconds over the case's
seconds: Spark local[1] runs its tasks on one thread, but the JVM's compiler and collector and
dbt's Python run beside them), Spark's speed-up from one core to two (goal >= 1.6x), and Spark
local[2] against DuckDB (goal within 3x). From those, the cores a cluster would need for
4 billion readings a day within a 2-hour nightly window, assuming Spark scales linearly in cores
from the measured lines per second per core (an upper bound of the speed a cluster gets: its
shuffles cross the network) and its fixed costs stay those of one machine.

Data under /work/bench-data (DAYCLOSE_BENCH_DATA); raw results in bench/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from datetime import date, datetime
from pathlib import Path

from bench.common import DATA, Timer, fresh_target, load_average, log, machine, units_landing, write_results

AS_OF = datetime(2026, 11, 3, 0, 30)
CASES = {"duckdb": ("duckdb", None), "spark-1": ("spark", "local[1]"), "spark-2": ("spark", "local[2]")}
READINGS_PER_DAY = 4_000_000_000  # incident 003's breweries
NIGHT_HOURS = 2


def run_case(engine: str, landing: Path, workdir: Path, out: Path) -> None:
    """One case, in this process: load, then the night; results as JSON in `out`."""
    from dayclose.jobs import run_nightly
    from dayclose.loader import load_source
    from dayclose.sources import source
    from dayclose.warehouse import Warehouse

    r: dict = {}
    if engine == "spark":
        os.environ["DAYCLOSE_SCHEMA"] = "bench"
        os.environ["DAYCLOSE_STATE_DIR"] = str(workdir / f"state-spark-{time.time_ns()}")
        from dayclose.settings import resolve_target

        target = resolve_target("spark")
        context = None
    else:
        context = fresh_target(engine, workdir)
        target = context.__enter__()
    try:
        started = Timer()
        with Warehouse(target) as wh:  # on Spark: the JVM's start, apart from the load
            wh.scalar("select 1")
            r["start_s"] = started.seconds
            clock = Timer()
            report = load_source(wh, source("units"), landing, AS_OF, progress=None)
        r["load_s"] = clock.seconds
        r["lines"] = report.rows_loaded
        clock = Timer()
        summary = run_nightly("units", target, landing, AS_OF, quiet=True)
        r["night_s"] = clock.seconds
        if not summary.ok:
            raise SystemExit("\n".join(summary.lines()))
        r["steps"] = {k: round(v, 2) for k, v in summary.step_seconds.items()}
        r["build_s"] = summary.step_seconds.get("build", 0.0)
        with Warehouse(target) as wh:
            rows = wh.query(
                f"select production_date, sku, good_units, rejected_units from {target.schema}_published"
                ".daily_good_units"
            )
        r["published"] = sorted([str(d), s, int(g), int(j)] for d, s, g, j in rows)
    finally:
        if context is not None:
            context.__exit__(None, None, None)
    out.write_text(json.dumps(r))


def tree_sample(pid: int, cpu: dict[int, float]) -> int:
    """Resident bytes of a process and its descendants (the JVM is pyspark's child); each
    one's CPU seconds so far (user and system) recorded in `cpu` by process id."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
            times = p.cpu_times()
            cpu[p.pid] = times.user + times.system
    return total


def case(name: str, landing: Path, workdir: Path) -> dict:
    engine, master = CASES[name]
    out = workdir / f"{name}.json"
    out.unlink(missing_ok=True)
    env = {**os.environ, **({"DAYCLOSE_SPARK_MASTER": master} if master else {})}
    args = [sys.executable, "-m", "bench.spark", "--case", engine, "--landing", str(landing)]
    args += ["--workdir", str(workdir), "--out", str(out)]
    clock = Timer()
    child = subprocess.Popen(args, env=env)
    peak = [0]
    cpu: dict[int, float] = {}

    def sample() -> None:
        while child.poll() is None:
            peak[0] = max(peak[0], tree_sample(child.pid, cpu))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    if child.wait() != 0:
        raise SystemExit(f"{name}: the case failed (exit {child.returncode})")
    sampler.join()
    r = json.loads(out.read_text())
    # the tree's CPU seconds (to its last sample) over the case's seconds: the cores it used
    r.update(process_s=clock.seconds, peak_rss_gb=peak[0] / 1e9, load=round(load_average(), 2))
    r.update(cpu_s=sum(cpu.values()), cores_used=sum(cpu.values()) / clock.seconds)
    return r


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--units-per-day", type=int, default=10_000_000)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--workdir", default=str(DATA / "work-spark"))
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--landing", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.case:
        run_case(args.case, Path(args.landing), workdir, Path(args.out))
        return
    log(f"bench.spark: {json.dumps(vars(args))}")
    landing = units_landing(2, args.units_per_day, start=date(2026, 11, 1))
    results: dict = {"machine": machine(), "args": vars(args), "landing": str(landing), "cases": {}}
    for name in args.cases.split(","):
        log(f"{name}: load and night")
        results["cases"][name] = case(name, landing, workdir)
        c = results["cases"][name]
        log(
            f"  start {c['start_s']:.1f} s, load {c['load_s']:.1f} s, night {c['night_s']:.1f} s "
            f"(build {c['build_s']:.1f} s), peak {c['peak_rss_gb']:.2f} GB, {c['cores_used']:.2f} cores used"
        )
        write_results("bench-spark-partial", results)
    cases = results["cases"]
    reference = cases.get("duckdb", next(iter(cases.values())))["published"]
    for name, c in cases.items():
        if c.pop("published") != reference:
            raise SystemExit(f"{name}: published daily_good_units differ from the first case's")
    results["figures"] = figures(cases)
    out = write_results("bench-spark", results)
    print(json.dumps(results["figures"], indent=2))
    print(f"\nraw results: {out}")


def figures(cases: dict) -> dict:
    f: dict = {}
    for name, c in cases.items():
        cores = 2 if name in ("duckdb", "spark-2") else 1
        f[name] = {
            "load_lines_per_s_per_core": c["lines"] / c["load_s"] / cores,
            "build_lines_per_s_per_core": c["lines"] / c["build_s"] / cores,
            "night_s": c["night_s"],
            "peak_rss_gb": c["peak_rss_gb"],
            "cores_used": c["cores_used"],
        }
    if "spark-1" in cases and "spark-2" in cases:
        one, two = cases["spark-1"], cases["spark-2"]
        f["spark_speedup_1_to_2_cores"] = (one["load_s"] + one["night_s"]) / (two["load_s"] + two["night_s"])
        # cores for 4 billion readings in the window, from local[2]'s lines per second per core
        per_core = two["lines"] / (two["load_s"] + two["night_s"]) / 2
        f["cluster_cores_for_4e9_in_2h"] = READINGS_PER_DAY / (NIGHT_HOURS * 3600) / per_core
    if "duckdb" in cases and "spark-2" in cases:
        d, s = cases["duckdb"], cases["spark-2"]
        f["spark_2_vs_duckdb"] = (s["load_s"] + s["night_s"]) / (d["load_s"] + d["night_s"])
    return f


if __name__ == "__main__":
    main()
