"""`dayclose report`: one static HTML page, with its charts as PNG files, from the published schema.

What readers would rather look at than read: the lateness curve of each source with its
nightly window and its 99.9% point, how complete each recent day is expected to be, dead
letters by kind and arrival day, the run history with the time of each step, and the
restatements. It reads only what readers read: the published schema (on DuckDB, the
readers' file, so it never blocks a nightly run).
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from dayclose.errors import EXIT_NOT_FOUND, DaycloseError
from dayclose.publish import readers_file
from dayclose.settings import Target
from dayclose.sources import sources
from dayclose.warehouse import postgres_connect

RECENT_DAYS = 14


@dataclass
class Published:
    """Queries against what readers read: DuckDB's readers' file or Postgres' published schema."""

    target: Target
    conn: Any
    prefix: str

    def query(self, sql: str) -> list[tuple]:
        """Rows of `sql`, where {p} stands for the published schema's prefix ('' or 'schema.')."""
        text = sql.format(p=self.prefix)
        if self.target.name == "duckdb":
            return self.conn.execute(text).fetchall()
        with self.conn.cursor() as cur:
            cur.execute(text)
            return cur.fetchall()

    def has(self, table: str) -> bool:
        schema = "main" if self.target.name == "duckdb" else self.prefix.rstrip(".")
        sql = (
            "select count(*) from information_schema.tables "
            f"where table_schema = '{schema}' and table_name = '{table}'"
        )
        return bool(self.query(sql)[0][0])


@contextlib.contextmanager
def published(target: Target) -> Iterator[Published]:
    if target.name == "duckdb":
        import duckdb

        path = readers_file(target)
        if path is None or not path.exists():
            raise DaycloseError(
                f"no published numbers yet: {path} does not exist (run `dayclose run` first)", EXIT_NOT_FOUND
            )
        conn = duckdb.connect(str(path), read_only=True)
        try:
            yield Published(target, conn, "")
        finally:
            conn.close()
        return
    conn = postgres_connect("dayclose report")
    try:
        yield Published(target, conn, f"{target.schema}_published.")
    finally:
        conn.close()


def _figure(width: float = 8.0, height: float = 3.6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), dpi=110)
    ax.grid(True, alpha=0.3)
    return plt, fig, ax


def _save(plt: Any, fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def lateness_chart(db: Published, out: Path) -> str | None:
    """The share of a day's events arrived by each age, per source, window and 99.9% marked."""
    if not db.has("arrival_lateness_curve"):
        return None
    rows = db.query(
        "select source_name, age_hours, share_arrived from {p}arrival_lateness_curve "
        "where age_hours <= 168 order by 1, 2"
    )
    if not rows:
        return None
    windows = {}
    if db.has("arrival_lateness"):
        windows = dict(db.query("select source_name, configured_window_days from {p}arrival_lateness"))
    plt, fig, ax = _figure()
    for source in sorted({r[0] for r in rows}):
        points = [(int(a), float(s)) for name, a, s in rows if name == source]
        color = ax.plot([a for a, _ in points], [s for _, s in points], label=source)[0].get_color()
        if source in windows:  # a window of W days rebuilds a day for the last time at (W - 1) * 24 h
            last = (int(windows[source]) - 1) * 24
            ax.axvline(last, color=color, linestyle="--", linewidth=1)
            ax.annotate(
                f"{source}: {windows[source]}-day window", (last, 0.905), rotation=90, fontsize=7, color=color
            )
        p999 = next((a for a, share in points if share >= 0.999), None)
        if p999 is not None:
            ax.plot([p999], [0.999], marker="o", color=color)
            ax.annotate(
                f"{source}: 99.9% by {p999} h",
                (p999, 0.999),
                fontsize=7,
                xytext=(4, -12),
                textcoords="offset points",
                color=color,
            )
    ax.set_xlabel("hours after the end of the day")
    ax.set_ylabel("share of the day's events arrived")
    ax.set_ylim(0.9, 1.002)
    ax.set_title("How late events arrive (measured; dashed: the nightly window's last rebuild)")
    ax.legend(loc="lower right")
    return _save(plt, fig, out / "lateness_curve.png")


def completeness_chart(db: Published, out: Path) -> str | None:
    """Expected completeness of the most recent days of each source's daily mart."""
    series = []
    for source in sources().values():
        if not db.has(source.mart):
            continue
        rows = db.query(
            f"select {source.date_column}, min(expected_share_complete), bool_or(can_still_change) "
            f"from {{p}}{source.mart} group by 1 order by 1 desc limit {RECENT_DAYS}"
        )
        series.append((source.name, sorted(rows)))
    if not any(rows for _, rows in series):
        return None
    plt, fig, ax = _figure()
    width = 0.8 / max(len(series), 1)
    for i, (name, rows) in enumerate(series):
        days = [r[0] for r in rows]
        shares = [float(r[1]) if r[1] is not None else 0.0 for r in rows]
        xs = [d.toordinal() + i * width for d in days]
        colors = ["#e39b3a" if r[2] else "#3a7be3" for r in rows]
        ax.bar(xs, shares, width=width, color=colors, label=name, edgecolor="black", linewidth=0.3)
        for x, s in zip(xs, shares, strict=True):
            if s < 0.9995:  # label the days still filling up
                ax.annotate(
                    f"{s:.1%}", (x, s), fontsize=6, ha="center", xytext=(0, 2), textcoords="offset points"
                )
    all_days = sorted({r[0] for _, rows in series for r in rows})
    ax.set_xticks(
        [d.toordinal() for d in all_days], [f"{d:%m-%d}" for d in all_days], rotation=45, fontsize=7
    )
    ax.set_ylim(min(0.9, min(float(r[1] or 0) for _, rows in series for r in rows)), 1.01)
    ax.set_ylabel("expected share complete")
    ax.set_title(
        "Recent days: orange can still change, blue final (bars: " + ", ".join(n for n, _ in series) + ")"
    )
    return _save(plt, fig, out / "completeness.png")


def dead_letter_chart(db: Published, out: Path) -> str | None:
    """Dead letters by kind and arrival day, per source (stacked)."""
    rows = []
    for source in sources().values():
        if db.has(source.dead_letter_counts):
            rows += [
                (source.name, d, k, int(n))
                for d, k, n in db.query(
                    "select arrival_date, dead_letter_kind, sum(dead_letters) "
                    f"from {{p}}{source.dead_letter_counts} group by 1, 2 order by 1"
                )
            ]
    if not rows:
        return None
    days = sorted({r[1] for r in rows})[-RECENT_DAYS * 2 :]
    kinds = sorted({(r[0], r[2]) for r in rows if r[1] in days})
    plt, fig, ax = _figure()
    bottom = [0] * len(days)
    for source, kind in kinds:
        counts = {r[1]: r[3] for r in rows if (r[0], r[2]) == (source, kind)}
        values = [counts.get(d, 0) for d in days]
        ax.bar(range(len(days)), values, bottom=bottom, label=f"{source}: {kind}")
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xticks(range(len(days)), [f"{d:%m-%d}" for d in days], rotation=45, fontsize=7)
    ax.set_ylabel("lines dead-lettered")
    ax.set_title("Dead letters by arrival day and kind")
    ax.legend(fontsize=6, ncol=2)
    return _save(plt, fig, out / "dead_letters.png")


def run_history_chart(db: Published, out: Path) -> str | None:
    """The last runs with the seconds of each step; failed runs marked."""
    if not db.has("run_audit"):
        return None
    rows = db.query(
        "select job, as_of, coalesce(lock_s, 0), coalesce(load_s, 0), coalesce(build_s, 0), "
        "coalesce(publish_s, 0), published, started_at from {p}run_audit order by started_at desc limit 30"
    )[::-1]
    if not rows:
        return None
    plt, fig, ax = _figure(9, 3.8)
    bottom = [0.0] * len(rows)
    for i, step in enumerate(("lock", "load", "build", "publish")):
        values = [float(r[2 + i]) for r in rows]
        ax.bar(range(len(rows)), values, bottom=bottom, label=step)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for x, r in enumerate(rows):
        if not r[6]:
            ax.annotate(
                "not published",
                (x, bottom[x]),
                rotation=90,
                fontsize=6,
                color="red",
                xytext=(0, 3),
                textcoords="offset points",
            )
    ax.set_xticks(range(len(rows)), [f"{r[0]} {r[1]:%m-%d %H:%M}" for r in rows], rotation=60, fontsize=6)
    ax.set_ylabel("seconds")
    ax.set_title("Run history: time of each step")
    ax.legend(fontsize=7)
    return _save(plt, fig, out / "run_history.png")


def _table(headers: list[str], rows: list[tuple]) -> str:
    if not rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def restatements(db: Published) -> str:
    audit = []
    if db.has("restatement_audit"):
        audit = db.query(
            "select restated_at, job, first_day, last_day, restated_by, reason, total_before, total_after, "
            "published from {p}restatement_audit order by restated_at desc limit 20"
        )
    closed = []
    if db.has("units_restatements"):
        closed = db.query(
            "select production_date, sku, published_at_close, restated_good_units, delta, reason "
            "from {p}units_restatements order by restated_as_of desc limit 20"
        )
    return (
        "<h3>Restatements</h3>"
        + _table(
            [
                "when",
                "job",
                "first day",
                "last day",
                "by",
                "reason",
                "total before",
                "total after",
                "published",
            ],
            audit,
        )
        + "<h3>Changes to closed months (units)</h3>"
        + _table(["production date", "sku", "at close", "restated", "delta", "reason"], closed)
    )


def write_report(target: Target, out: Path) -> Path:
    """Write out/index.html and its PNGs; returns the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    with published(target) as db:
        charts = [
            ("How late data arrives", lateness_chart(db, out)),
            ("Recent days", completeness_chart(db, out)),
            ("Dead letters", dead_letter_chart(db, out)),
            ("Runs", run_history_chart(db, out)),
        ]
        tail = restatements(db)
        last = (
            db.query("select max(as_of) from {p}run_audit where published")
            if db.has("run_audit")
            else [(None,)]
        )
    sections = "".join(
        f"<section><h2>{html.escape(title)}</h2>"
        + (f'<img src="{name}" alt="{html.escape(title)}">' if name else "<p><em>no data yet</em></p>")
        + "</section>"
        for title, name in charts
    )
    page = out / "index.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>dayclose report</title><style>"
        "body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}"
        "img{max-width:100%;border:1px solid #ddd}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 6px}</style></head><body>"
        f"<h1>dayclose: the published numbers</h1><p>Read from {html.escape(where(target))}; "
        f"last published run as of {last[0][0]} UTC; written {date.today()}.</p>"
        f"{sections}<section><h2>Restatements</h2>{tail}</section></body></html>"
    )
    return page


def where(target: Target) -> str:
    if target.name == "duckdb":
        return str(readers_file(target))
    return f"Postgres schema {target.schema}_published"
