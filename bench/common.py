"""What the benchmarks share: landings, fresh warehouses, progress, machine facts, results.

Generated data goes under the data folder (`--data`, default /work/bench-data, or
DAYCLOSE_BENCH_DATA), never into the repository; raw results go to bench/results/
(git-ignored). Every figure is recorded with the machine's load average at the time.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import date, datetime
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
DATA = Path(os.environ.get("DAYCLOSE_BENCH_DATA", "/work/bench-data"))
ENGINES = ("duckdb", "postgres")


# -- progress ------------------------------------------------------------------------------
def load_average() -> float:
    """The 1-minute load average (other work shares this machine: recorded with each figure)."""
    return os.getloadavg()[0]


def log(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S} load {load_average():.2f}] {message}", flush=True)


@contextlib.contextmanager
def ticking(what: str, every: float = 10.0, status: Callable[[], str] | None = None) -> Iterator[None]:
    """Print `what` is still running every `every` seconds (with `status()` if given)."""
    done = threading.Event()
    started = time.monotonic()

    def tick() -> None:
        while not done.wait(every):
            extra = ""
            if status is not None:
                with contextlib.suppress(Exception):
                    extra = f" - {status()}"
            log(f"  ... {what}: {time.monotonic() - started:,.0f} s{extra}")

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def dbt_log_status(state_dir: Path) -> Callable[[], str]:
    """The last node dbt started or finished, read from the tail of its log (for `ticking`)."""

    def status() -> str:
        path = state_dir / "logs" / "dbt.log"
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - 20000))
            tail = fh.read().decode("utf-8", "replace").splitlines()
        for line in reversed(tail):
            for marker in ("Began running node", "START sql", "START test"):
                if marker in line:
                    return "dbt: " + " ".join(line.split()[2:])[:120]
        return "dbt: starting"

    return status


# -- landings ------------------------------------------------------------------------------
def sales_landing(
    days: int, per_day: int, seed: int = 42, shops: int = 140, start: date = date(2026, 1, 1)
) -> Path:
    """A sales landing of `days` days (generated once, kept under DATA)."""
    from dayclose.generate import generate_sales

    path = DATA / f"sales-{per_day}x{days}-s{seed}-shops{shops}"
    if not (path / "truth").exists():
        shutil.rmtree(path, ignore_errors=True)
        log(f"generating sales: {days} days x {per_day:,} events into {path}")
        with ticking(f"generating {path.name}", every=30):
            generate_sales(path, start, days, shops=shops, events_per_day=per_day, seed=seed)
        log(f"  generated {path.name}: {du_bytes(path) / 1e9:.2f} GB")
    return path


def units_landing(
    days: int, per_day: int, seed: int = 3, plants: int = 300, start: date = date(2026, 11, 1)
) -> Path:
    from dayclose.generate import generate_units

    path = DATA / f"units-{per_day}x{days}-s{seed}-plants{plants}"
    if not (path / "truth").exists():
        shutil.rmtree(path, ignore_errors=True)
        log(f"generating units: {days} days x {per_day:,} units into {path}")
        with ticking(f"generating {path.name}", every=30):
            generate_units(path, start, days, plants=plants, units_per_day=per_day, seed=seed)
        log(f"  generated {path.name}: {du_bytes(path) / 1e9:.2f} GB")
    return path


def du_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def landing_files(landing: Path, source: str) -> list[str]:
    return sorted(str(p) for p in landing.glob(f"{source}/arrived=*/part-*.jsonl"))


# -- warehouses ----------------------------------------------------------------------------
def postgres_env() -> None:
    os.environ.setdefault("PGHOST", "127.0.0.1")
    os.environ.setdefault("PGUSER", "postgres")


@contextlib.contextmanager
def fresh_target(engine: str, workdir: Path, keep: bool = False):
    """A new empty warehouse: a DuckDB file, or a Postgres database dropped afterwards
    (kept, for a look afterwards, when DAYCLOSE_BENCH_KEEP=1)."""
    keep = keep or os.environ.get("DAYCLOSE_BENCH_KEEP") == "1"
    import psycopg2

    from dayclose.settings import resolve_target

    workdir.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    os.environ["DAYCLOSE_STATE_DIR"] = str(workdir / f"state-{tag}")
    if engine == "duckdb":
        path = workdir / f"bench-{tag}.duckdb"
        os.environ["DAYCLOSE_DUCKDB"] = str(path)
        try:
            yield resolve_target("duckdb")
        finally:
            if not keep:  # the warehouse, its readers' copy (publish), the run lock, their logs
                for leftover in (path, path.with_suffix(".published.duckdb"), Path(f"{path}.lock")):
                    leftover.unlink(missing_ok=True)
                    Path(f"{leftover}.wal").unlink(missing_ok=True)
                shutil.rmtree(workdir / f"state-{tag}", ignore_errors=True)
        return
    postgres_env()
    name = f"dayclose_bench_{tag}"
    admin = psycopg2.connect(dbname="postgres")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"create database {name}")
    os.environ["PGDATABASE"] = name
    try:
        yield resolve_target("postgres")
    finally:
        if not keep:
            with admin.cursor() as cur:
                cur.execute(f"drop database if exists {name} with (force)")
            shutil.rmtree(workdir / f"state-{tag}", ignore_errors=True)
        admin.close()


# -- dbt nodes -----------------------------------------------------------------------------
def node_seconds(outcome) -> list[dict]:
    """Each dbt node of an outcome with its time, slowest first."""
    if outcome is None:
        return []
    rows = [
        {"name": n.name, "type": n.resource_type, "status": n.status, "seconds": round(n.seconds, 3)}
        for n in outcome.nodes
    ]
    return sorted(rows, key=lambda r: -r["seconds"])


def top_nodes(nodes: list[dict], n: int = 8) -> str:
    return ", ".join(f"{r['name']} {r['seconds']:.1f}s" for r in nodes[:n])


# -- machine and results -------------------------------------------------------------------
def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def machine() -> dict:
    mem_gib = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    postgres = "-"
    with contextlib.suppress(Exception):
        postgres_env()
        postgres = subprocess.run(
            ["psql", "-d", "postgres", "-tAc", "show server_version"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    return {
        "cores": os.cpu_count(),
        "ram_gib": mem_gib,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "duckdb": _version("duckdb"),
        "dbt_core": _version("dbt-core"),
        "dbt_duckdb": _version("dbt-duckdb"),
        "dbt_postgres": _version("dbt-postgres"),
        "postgres": postgres,
        "git_commit": _git_head(),
        "load_at_start": load_average(),
    }


def _git_head() -> str:
    with contextlib.suppress(Exception):
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        ).stdout.strip()
    return "-"


def write_results(name: str, results: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(results, indent=2, default=str))
    return out


def table(header: list[str], rows: list[tuple[str, list, str]]) -> str:
    """A markdown table: one row per (label, values, format)."""
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for label, values, fmt in rows:
        cells = []
        for v in values:
            cells.append("-" if v is None else fmt.format(v))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


class Timer:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started
