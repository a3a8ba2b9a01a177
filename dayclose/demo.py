"""`dayclose demo`: incidents 000 and 003 replayed on the embedded DuckDB default.

Sales: it generates the incident's week (with five weeks of history before it, so
lateness can be measured), runs the nightly job at Tue, Wed, Thu and Fri 00:30,
and prints Monday's total each night beside what the original job would still
show (sold_at date, one overwrite on Tuesday, never again) and the truth.

Units: the same week of brewery production, with a plant offline at midnight that
replays its backlog four hours later and again in full two hours after that, and
garbage readings; it prints the published Monday count beside the truth per run.
"""

from __future__ import annotations

import calendar
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path

from dayclose.generate import Outage, generate_sales, generate_units, read_sales_truth, read_units_truth
from dayclose.jobs import RunSummary, run_nightly
from dayclose.settings import PROJECT_DIR, resolve_target
from dayclose.stream.demo import operators_story
from dayclose.warehouse import Warehouse, fresh_warehouse

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
    # the demo replays past nights, so it runs in a warehouse of its own, new each time
    fresh_warehouse(target_name, PROJECT_DIR / ".dayclose" / "demo" / "dayclose-demo.duckdb", "dayclose_demo")
    target = resolve_target(target_name)
    landing = landing or PROJECT_DIR / ".dayclose" / "demo" / "landing"
    start = MONDAY - timedelta(days=HISTORY_DAYS)
    truth_file = landing / "truth" / "sales_daily_totals.csv"
    if not truth_file.exists():
        print(f"generating {HISTORY_DAYS + 7} days of till sales for {SHOPS} shops into {landing} ...")
        generate_sales(landing, start, HISTORY_DAYS + 7, shops=SHOPS, seed=SEED)
    truth = sum(
        (
            Decimal(amount)
            for (day, _), (amount, _) in read_sales_truth(truth_file).items()
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
        label = f"{name} {as_of:%Y-%m-%d %H:%M}"
        print(
            f"{label:<20}  {ours:>14,.2f} {ours / truth:>7.1%}  {original:>14,.2f} {original / truth:>7.1%}"
        )
    print(f"{'truth (generator)':<20}  {truth:>14,.2f} {1:>7.1%}")
    assert last is not None
    print(f"\nafter the run of Fri {last.as_of:%Y-%m-%d %H:%M}:")
    for day in last.days:
        state = "can still change" if day.can_still_change else "final"
        share = "-" if day.expected_share_complete is None else f"{day.expected_share_complete:.1%}"
        print(
            f"  {day.day} ({day.day:%a}): {Decimal(day.total):>12,.2f}  {state:<17} expected complete {share}"
        )
    _print_lateness(last, "sales")
    return units_story(landing, target_name) or operators_story(
        PROJECT_DIR / ".dayclose" / "demo", target_name
    )


def _print_lateness(summary: RunSummary, what: str) -> None:
    lt = summary.lateness
    if lt.get("share") is not None:
        print(
            f"\nmeasured lateness: p99 {lt['p99']:.1f} h, p99.9 {lt['p999']:.1f} h; the "
            f"{lt['configured']}-day window covers {lt['share']:.2%} of {what}; "
            f"recommended window: {lt['recommended']} days"
        )


PLANT = "P-007"
PLANTS = 50
UNITS_PER_DAY = 20_000


def units_story(landing: Path, target_name: str | None) -> int:
    """Incident 003: a plant offline at midnight replays its backlog, then replays it again."""
    target = resolve_target(target_name)
    midnight = datetime.combine(MONDAY + timedelta(days=1), time(0, 0))
    outage = Outage(
        PLANT,
        _epoch(midnight - timedelta(hours=2)),
        _epoch(midnight + timedelta(hours=4)),
        _epoch(midnight + timedelta(hours=6)),
    )
    truth_file = landing / "truth" / "units_daily_good.csv"
    if not truth_file.exists():
        generate_units(
            landing,
            MONDAY - timedelta(days=HISTORY_DAYS),
            HISTORY_DAYS + 7,
            plants=PLANTS,
            units_per_day=UNITS_PER_DAY,
            seed=SEED,
            forced_outage=outage,
        )
    truth = sum(n for (day, _), n in read_units_truth(truth_file).items() if day == MONDAY.isoformat())
    print(f"\nBreweries: {PLANTS} plants, {UNITS_PER_DAY:,} units a day. {PLANT} goes offline Mon 22:00,")
    print("reconnects Tue 04:00 and replays its backlog, then replays the whole backlog again at 06:00.")
    print(f"Monday {MONDAY}: good units per run (the units window is 2 days)")
    head = f"{PLANT} units"
    print(f"{'run':<20}  {'published':>14} {'share':>7}  {head:>14}  {'dead letters':>12}")
    runs = (
        ("Tue", 1, time(0, 30)),
        ("Tue", 1, time(5, 30)),
        ("Tue", 1, time(7, 30)),
        ("Wed", 2, time(0, 30)),
    )
    last: RunSummary | None = None
    for name, offset, at in runs:
        as_of = datetime.combine(MONDAY + timedelta(days=offset), at)
        last = run_nightly("units", target, landing, as_of, quiet=True)
        if not last.ok:
            print("\n".join(last.lines()))
            return 1
        with Warehouse(target) as wh:
            plant_units = wh.scalar(
                f"select coalesce(sum(units), 0) from {target.schema}.line_daily_units "
                "where plant_id = %s and production_date = %s",
                (PLANT, MONDAY),
            )
            published = wh.scalar(
                f"select coalesce(sum(good_units), 0) from {target.schema}.daily_good_units "
                "where production_date = %s",
                (MONDAY,),
            )
        label = f"{name} {as_of:%Y-%m-%d %H:%M}"
        print(
            f"{label:<20}  {int(published):>14,} {int(published) / truth:>7.1%}  {int(plant_units):>14,}  "
            f"{sum(last.dead_letters.values()):>12,}"
        )
    print(f"{'truth (generator)':<20}  {truth:>14,} {1:>7.1%}")
    assert last is not None
    with Warehouse(target) as wh:
        flagged, stuck = wh.query(
            "select sum(units_out_of_spec), sum(units_with_stuck_sensor) "
            f"from {target.schema}.line_daily_units "
            "where production_date = %s",
            (MONDAY,),
        )[0]
    print(
        f"Monday: {int(flagged or 0):,} units with an out-of-spec reading and {int(stuck or 0):,} from a "
        "stuck sensor were flagged, and counted by the PLC's verdict."
    )
    _print_lateness(last, "units")
    return 0


def _epoch(value: datetime) -> int:
    return calendar.timegm(value.timetuple())
