"""docs/benchmarks.md from the raw results in bench/results/: one current table per benchmark.

    .venv/bin/python -m bench.figures                 # print the tables of the newest results
    .venv/bin/python -m bench.figures --write docs/benchmarks.md   # the page, generated
    .venv/bin/python -m bench.figures FILE.json ...   # the tables of these files

For each benchmark the newest file of each engine counts (an engine's newer run replaces its
older one; runs of one engine each are merged).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.common import RESULTS, table


def _latest(prefix: str) -> list[Path]:
    """The newest result file of each engine and case (a run of some cases replaces those
    cases only; for results without engines, the newest), oldest first."""
    chosen: list[Path] = []
    covered: set[tuple[str, str]] = set()
    for path in sorted(RESULTS.glob(f"{prefix}-2*.json"), reverse=True):
        engines = json.loads(path.read_text()).get("engines", {})
        cases = {(engine, key) for engine, figures in engines.items() for key in figures} or {("-", "-")}
        if cases - covered:
            chosen.insert(0, path)
            covered |= cases
    return chosen


def _load(paths: list[Path]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {"sales": [], "units": [], "peer": [], "spark": []}
    for p in paths:
        doc = json.loads(p.read_text())
        doc["_file"] = p.name
        kind = "spark" if p.name.startswith("bench-spark") else "peer" if "cases" in doc else None
        kind = kind or ("units" if "landing" in doc else "sales")
        out[kind].append(doc)
    return out


def _engines(docs: list[dict]) -> tuple[dict, list[dict]]:
    """Each engine's figures, a newer file's cases over an older one's."""
    merged: dict = {}
    for d in docs:
        for engine, figures in d["engines"].items():
            merged.setdefault(engine, {}).update(figures)
    return merged, docs


def _get(d: dict, *path):
    """d[path[0]][path[1]]..., None where a key (or a list's index) is missing."""
    for p in path:
        in_list = isinstance(d, list) and isinstance(p, int) and -len(d) <= p < len(d)
        if not in_list and not (isinstance(d, dict) and p in d):
            return None
        d = d[p]
    return d


def sales_tables(docs: list[dict]) -> str:
    e, _ = _engines(docs)
    cols = list(e)
    # the arguments of the run that measured each engine's history (the case they describe)
    args = {
        c: next(
            (d["args"] for d in reversed(docs) if "history_ratio" in d["engines"].get(c, {})),
            next(d["args"] for d in docs if c in d["engines"]),
        )
        for c in cols
    }

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
    rows += [
        (
            "(e) a night loading a batch of 200,000 sales (s)",
            [_get(e[c], "corrected", "batch_night", "seconds") for c in cols],
            "{:.1f}",
        ),
        (
            "(e) the night after that batch came again with a new manifest (150,000 ids at another "
            "amount, 1,000 new, the rest gone) (s)",
            [_get(e[c], "corrected", "correction_night", "seconds") for c in cols],
            "{:.1f}",
        ),
    ]
    per_day = args[cols[0]]["events_per_day"] if cols else 0
    return table([f"sales, {per_day:,} events/day"] + cols, rows)


def units_tables(docs: list[dict]) -> str:
    e, _ = _engines(docs)
    cols = list(e)
    per_day = {c: next(d["args"]["units_per_day"] for d in reversed(docs) if c in d["engines"]) for c in cols}
    rows = [
        ("units a day", [per_day[c] for c in cols], "{:,}"),
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
    out = [table(["units"] + cols, rows)]
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


def spark_tables(docs: list[dict]) -> str:
    """The units night on Spark local[1] and local[2] beside DuckDB, from the newest run."""
    doc = docs[-1]
    cases, f = doc["cases"], doc.get("figures", {})
    cols = list(cases)
    rows = [
        (
            "lines loaded (2 days, with replays, retries and garbage)",
            [cases[c]["lines"] for c in cols],
            "{:,}",
        ),
        (
            "JVM and session start (s)",
            [cases[c]["start_s"] if c != "duckdb" else None for c in cols],
            "{:.1f}",
        ),
        ("load of the window (s)", [cases[c]["load_s"] for c in cols], "{:.1f}"),
        ("night: every units model and gate, publish (s)", [cases[c]["night_s"] for c in cols], "{:.1f}"),
        ("  of which the dbt build (s)", [cases[c]["build_s"] for c in cols], "{:.1f}"),
        (
            "lines per second per core, load and night",
            [
                cases[c]["lines"] / (cases[c]["load_s"] + cases[c]["night_s"]) / (1 if c == "spark-1" else 2)
                for c in cols
            ],
            "{:,.0f}",
        ),
        (
            "peak memory of the process tree, JVM included (GB)",
            [cases[c]["peak_rss_gb"] for c in cols],
            "{:.2f}",
        ),
        (
            "cores used: the process tree's CPU seconds over the case's seconds",
            [cases[c].get("cores_used") for c in cols],
            "{:.2f}",
        ),
        ("load average at the case's end", [cases[c]["load"] for c in cols], "{}"),
    ]
    out = [table([f"units night, {doc['args']['units_per_day']:,} units/day"] + cols, rows)]
    out.append(
        "\nSpark's speed-up from one core to two (load and night; goal >= 1.6x): "
        f"**{_fmt(f.get('spark_speedup_1_to_2_cores'), '{:.2f}x')}**. Spark local[2] against DuckDB "
        f"(goal within 3x): **{_fmt(f.get('spark_2_vs_duckdb'), '{:.1f}x')}**. Cores for 4 billion "
        f"readings within a 2-hour window at local[2]'s lines per second per core: "
        f"**{_fmt(f.get('cluster_cores_for_4e9_in_2h'), '{:,.0f}')}** (assumptions: docs/spark.md)."
    )
    return "\n".join(out)


def _fmt(value, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


BENCHMARKS = (
    (
        "units",
        "bench-units",
        "Units at firehose scale (`python -m bench.units`)",
        "Two days of seed 003's production (10 M units a day, with replays, retries, duplicates and "
        "garbage) landed once; on each engine, in a fresh warehouse: the load of the window, the "
        "nightly run (every units model and gate from the raw lines, publish), and the same "
        "reconciliation as one hand-written statement, checked equal to `daily_good_units` row for row.",
        units_tables,
    ),
    (
        "sales",
        "bench-sales",
        "Sales history (`python -m bench.run`)",
        "(a) a night's cost against the length of the history: the nightly run (load the night's 24 "
        "batches, build with every gate, publish) with a long history against a short one; the cost "
        "must follow the window (goal: ratio <= 1.2). (b) the nightly run against the window as one "
        "hand-written statement. (c) the loader against the engine's bare bulk load. (d) the loading "
        "process's peak memory. (e) a corrected batch of 200,000 sales.",
        sales_tables,
    ),
    (
        "spark",
        "bench-spark",
        "The units night on Apache Spark (`python -m bench.spark`)",
        "Two days of seed 003's production (units a day as stated, with replays, retries, duplicates "
        "and garbage) landed once; each case in a process of its own and a fresh warehouse: the load "
        "of the window and the night (every units model and gate, publish), on DuckDB and on Spark "
        "in-process with one and with two cores; daily_good_units equal in every case.",
        spark_tables,
    ),
    (
        "peer",
        "bench-peer",
        "Against a peer, SQLMesh (`python -m bench.peer_sqlmesh`)",
        "A first build and the next night by dayclose and by a SQLMesh project doing the same "
        "reconciliation on the same landing and machine, daily sales compared row for row.",
        peer_tables,
    ),
)

HEADER = """# Benchmarks

Generated by `python -m bench.figures --write docs/benchmarks.md` from the raw results committed in
`bench/results/` (one JSON file per run: the arguments, the machine, the load average beside each
figure). One current table per benchmark: a newer run replaces the table. The benchmarks are
programs, never tests: run them on a quiet machine, and compare figures within one run (a shared,
virtualised machine's speed moves by up to 30% within a session). The streaming benchmark
(`python -m bench.stream`) writes `bench/results/stream-*.json`; its figures are in
[streaming.md](streaming.md).
"""


def _machine(doc: dict) -> str:
    m = doc.get("machine", {})
    load = m.get("load_at_start")
    return (
        f"{m.get('cores')} cores, {m.get('ram_gib')} GiB, Python {m.get('python')}, "
        f"DuckDB {m.get('duckdb')}, dbt-core {m.get('dbt_core')}, Postgres {m.get('postgres')}; "
        f"commit {m.get('git_commit')}; load average {_fmt(load, '{:.2f}')} at the start"
        + (f" ({m['note']})" if m.get("note") else "")
    )


def page() -> str:
    out = [HEADER]
    for kind, prefix, title, what, render in BENCHMARKS:
        out.append(f"## {title}\n\n{what}\n")
        paths = _latest(prefix)
        if not paths:
            out.append("No result committed yet.\n")
            continue
        docs = _load(paths)[kind]
        files = ", ".join(f"`bench/results/{d['_file']}`" for d in docs)
        out.append(f"From {files}. Machine: {_machine(docs[-1])}.\n")
        out.append(render(docs) + "\n")
    return "\n".join(out)


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--write"]:
        Path(args[1]).write_text(page())
        print(f"written: {args[1]}")
        return
    prefixes = ("bench-sales", "bench-units", "bench-spark", "bench-peer")
    paths = [Path(a) for a in args] or [p for prefix in prefixes for p in _latest(prefix)]
    docs = _load(paths)
    renders = (
        ("sales", sales_tables),
        ("units", units_tables),
        ("spark", spark_tables),
        ("peer", peer_tables),
    )
    for kind, render in renders:
        if docs[kind]:
            print(
                f"### {kind} ({', '.join(d['_file'] for d in docs[kind])}; "
                f"commit {docs[kind][-1]['machine'].get('git_commit')})\n"
            )
            print(render(docs[kind]))
            print()


if __name__ == "__main__":
    main()
