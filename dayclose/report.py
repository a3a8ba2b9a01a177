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
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from dayclose.errors import EXIT_NOT_FOUND, DaycloseError
from dayclose.publish import readers_file
from dayclose.settings import Target
from dayclose.sources import sources
from dayclose.warehouse import postgres_connect

RECENT_DAYS = 14
FAMILIES = ("Blues", "Oranges", "Greens", "Purples")  # a colour family per source


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
        schema = self.prefix.rstrip(".")
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
            yield Published(target, conn, f"{target.schema}_published.")
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


Chart = tuple[str | None, str]  # the PNG's file name (None: no data yet) and what it shows, in words


def lateness_chart(db: Published, out: Path) -> Chart:
    """The share of a day's events arrived by each age, per source, window and 99.9% marked."""
    if not db.has("arrival_lateness_curve"):
        return None, "lateness not measured yet"
    rows = db.query(
        "select source_name, age_hours, share_arrived from {p}arrival_lateness_curve "
        "where age_hours <= 168 order by 1, 2"
    )
    if not rows:
        return None, "lateness not measured yet (no settled days in the measurement range)"
    caption = []
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
        caption.append(
            f"{source}: 99.9% of a day's events arrived by {p999} h"
            if p999 is not None
            else f"{source}: 99.9% not reached within 168 h"
        )
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
    return _save(plt, fig, out / "lateness_curve.png"), "; ".join(caption)


def completeness_chart(db: Published, out: Path) -> Chart:
    """Expected completeness of the most recent days of each source's daily mart: no bar, and
    "not measured yet", for a day whose expected share is unknown (lateness not measured)."""
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
        return None, "no published days yet"
    plt, fig, ax = _figure()
    width = 0.8 / max(len(series), 1)
    known = [float(r[1]) for _, rows in series for r in rows if r[1] is not None]
    floor = min([0.9, *known])
    caption = []
    for i, (name, rows) in enumerate(series):
        for day, share, changing in rows:
            x = day.toordinal() + i * width
            state = "can still change" if changing else "final"
            if share is None:  # no bar: unknown is not 0%
                ax.annotate(
                    "not measured yet",
                    (x, floor),
                    fontsize=6,
                    ha="center",
                    rotation=90,
                    xytext=(0, 3),
                    textcoords="offset points",
                    color="#666",
                )
                caption.append(f"{name} {day}: not measured yet, {state}")
                continue
            color = "#e39b3a" if changing else "#3a7be3"
            ax.bar([x], [float(share)], width=width, color=color, edgecolor="black", linewidth=0.3)
            if float(share) < 0.9995:  # label the days still filling up
                ax.annotate(
                    f"{float(share):.1%}",
                    (x, float(share)),
                    fontsize=6,
                    ha="center",
                    xytext=(0, 2),
                    textcoords="offset points",
                )
            caption.append(f"{name} {day}: {float(share):.1%}, {state}")
    all_days = sorted({r[0] for _, rows in series for r in rows})
    ax.set_xticks(
        [d.toordinal() for d in all_days], [f"{d:%m-%d}" for d in all_days], rotation=45, fontsize=7
    )
    ax.set_ylim(floor, 1.01)
    ax.set_ylabel("expected share complete")
    ax.set_title(
        "Recent days: orange can still change, blue final (bars: " + ", ".join(n for n, _ in series) + ")"
    )
    return _save(plt, fig, out / "completeness.png"), "; ".join(caption)


def dead_letter_chart(db: Published, out: Path) -> Chart:
    """Dead letters by kind and arrival day, per source (stacked): each kind its own colour,
    each source its own colour family (units hatched), the legend beside the plot."""
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
        return None, "no dead letters"
    days = sorted({r[1] for r in rows})[-RECENT_DAYS * 2 :]
    kinds = sorted({(r[0], r[2]) for r in rows if r[1] in days})
    plt, fig, ax = _figure(11, 4.2)
    names = sorted({s for s, _ in kinds})
    families = {name: plt.get_cmap(FAMILIES[i % len(FAMILIES)]) for i, name in enumerate(names)}
    bottom = [0] * len(days)
    caption = []
    for source, kind in kinds:
        mine = [k for s, k in kinds if s == source]
        shade = 0.35 + 0.6 * mine.index(kind) / max(len(mine) - 1, 1)
        counts = {r[1]: r[3] for r in rows if (r[0], r[2]) == (source, kind)}
        values = [counts.get(d, 0) for d in days]
        ax.bar(
            range(len(days)),
            values,
            bottom=bottom,
            label=f"{source}: {kind}",
            color=families[source](shade),
            hatch="//" if source != names[0] else None,
            edgecolor="white",
            linewidth=0.3,
        )
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        caption.append(f"{source} {kind}: {sum(values):,}")
    ax.set_xticks(range(len(days)), [f"{d:%m-%d}" for d in days], rotation=45, fontsize=7)
    ax.set_ylabel("lines dead-lettered")
    ax.set_title("Dead letters by arrival day and kind")
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(plt, fig, out / "dead_letters.png"), "; ".join(caption)


def run_history_chart(db: Published, out: Path) -> Chart:
    """The last runs with the seconds of each step; failed runs marked."""
    if not db.has("run_audit"):
        return None, "no runs yet"
    rows = db.query(
        "select job, as_of, coalesce(lock_s, 0), coalesce(load_s, 0), coalesce(build_s, 0), "
        "coalesce(publish_s, 0), published, started_at from {p}run_audit order by started_at desc limit 30"
    )[::-1]
    if not rows:
        return None, "no runs yet"
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
    failed = sum(1 for r in rows if not r[6])
    return _save(
        plt, fig, out / "run_history.png"
    ), f"{len(rows)} run{'s' * (len(rows) != 1)}, {failed} not published"


def _cell(value: object) -> str:
    """A value as readers read it: whole numbers without `.0`, thousands separated, instants
    to the second (UTC)."""
    if isinstance(value, datetime):
        return f"{value:%Y-%m-%d %H:%M:%S}"
    if isinstance(value, bool) or value is None:
        return "" if value is None else ("yes" if value else "no")
    if isinstance(value, (int, float, Decimal)):
        if value == int(value):
            return f"{int(value):,}"
        return f"{value:,.2f}"
    return str(value)


def _table(headers: list[str], rows: list[tuple]) -> str:
    if not rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>" for row in rows
    )
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
        + (f'<img src="{name}" alt="{html.escape(title)}">' if name else "")
        + f'<p class="caption">{html.escape(caption)}</p>'
        + "</section>"
        for title, (name, caption) in charts
    )
    page = out / "index.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>dayclose report</title><style>"
        "body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}"
        "img{max-width:100%;border:1px solid #ddd}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 6px}.caption{font-size:12px;color:#555}</style></head><body>"
        f"<h1>dayclose: the published numbers</h1><p>Read from {html.escape(where(target))}; "
        f"last published run as of {_cell(last[0][0])} UTC; written {date.today()}.</p>"
        f"{sections}<section><h2>Restatements</h2>{tail}</section></body></html>"
    )
    return page


def where(target: Target) -> str:
    if target.name == "duckdb":
        return str(readers_file(target))
    return f"Postgres schema {target.schema}_published"
