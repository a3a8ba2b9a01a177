"""`dayclose demo`: incident 000 replayed on the embedded DuckDB default.

It generates the incident's week (with five weeks of history before it, so
lateness can be measured), runs the nightly job at Tue, Wed, Thu and Fri 00:30,
and prints Monday's total each night beside what the original job would still
show (sold_at date, one overwrite on Tuesday, never again) and the truth.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path

from flows.generate import generate_sales, read_truth
from flows.jobs import RunSummary, run_nightly
from flows.settings import resolve_target
from flows.warehouse import Warehouse

MONDAY = date(2026, 11, 23)
HISTORY_DAYS = 35
SHOPS = 140
SEED = 0
NIGHTS = ("Tue", "Wed", "Thu", "Fri")


def _monday_total(summary: RunSummary) -> Decimal:
    for day in summary.days:
        if day.day == MONDAY:
            return Decimal(day.total)
    return Decimal(0)


def original_job_total(target_name: str | None, as_of: datetime) -> Decimal:
    """The seed's SQL as it ran on Tuesday 00:30: Monday's sales known then, never rebuilt."""
    target = resolve_target(target_name)
    with Warehouse(target) as wh:
        value = wh.scalar(
            f"select sum(amount) from (select event_id, min(amount) as amount "
            f"from {target.schema}.int_sale_lines_validated "
            "where is_valid and sale_date = %s and batch_completed_at <= %s group by event_id) as s",
            (MONDAY, as_of),
        )
    return Decimal(value or 0)


def run_demo(landing: Path | None = None, target_name: str | None = None) -> int:
    target = resolve_target(target_name)
    landing = landing or target.state_dir.parent / "demo-landing"
    start = MONDAY - timedelta(days=HISTORY_DAYS)
    truth_file = landing / "truth" / "sales_daily_totals.csv"
    if not truth_file.exists():
        print(f"generating {HISTORY_DAYS + 7} days of till sales for {SHOPS} shops into {landing} ...")
        generate_sales(landing, start, HISTORY_DAYS + 7, shops=SHOPS, seed=SEED)
    truth = sum(
        (
            Decimal(amount)
            for (day, _), (amount, _) in read_truth(truth_file).items()
            if day == MONDAY.isoformat()
        ),
        Decimal(0),
    )
    where = target.duckdb_path or f"Postgres schema {target.schema}"
    print(f"warehouse: {where}\n")
    print(f"Monday {MONDAY}: daily sales of {SHOPS} shops, summed at each nightly run")
    print(f"{'run':<20}  {'dayclose':>14} {'share':>7}  {'original job':>14} {'share':>7}")
    original: Decimal | None = None
    last: RunSummary | None = None
    for offset, name in enumerate(NIGHTS, start=1):
        as_of = datetime.combine(MONDAY + timedelta(days=offset), time(0, 30))
        last = run_nightly("sales", target, landing, as_of, quiet=True)
        if not last.ok:
            print("\n".join(last.lines()))
            return 1
        if original is None:
            original = original_job_total(target_name, as_of)
        ours = _monday_total(last)
        print(
            f"{name} {as_of:%Y-%m-%d %H:%M}  {ours:>14,.2f} {ours / truth:>7.1%}  "
            f"{original:>14,.2f} {original / truth:>7.1%}"
        )
    print(f"{'truth (generator)':<18}{truth:>16,.2f} {1:>7.1%}")
    assert last is not None
    print(f"\nafter the run of Fri {last.as_of:%Y-%m-%d %H:%M}:")
    for day in last.days:
        state = "can still change" if day.can_still_change else "final"
        share = "-" if day.expected_share_complete is None else f"{day.expected_share_complete:.1%}"
        print(
            f"  {day.day} ({day.day:%a}): {Decimal(day.total):>12,.2f}  {state:<17} expected complete {share}"
        )
    lt = last.lateness
    if lt.get("share") is not None:
        print(
            f"\nmeasured lateness: p99 {lt['p99']:.1f} h, p99.9 {lt['p999']:.1f} h; the "
            f"{lt['configured']}-day window covers {lt['share']:.2%} of sales; "
            f"recommended window: {lt['recommended']} days"
        )
    return 0
