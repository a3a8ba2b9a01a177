"""Synthetic till sales that behave like incident 000's evidence.

Deterministic for a seed, streaming (memory does not grow with the number of events), and
it writes the ground truth beside the landing so tests and benchmarks can compare
published numbers with what really happened.
"""

from __future__ import annotations

import calendar
import json
import random
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

from dayclose.console import progress as console_progress
from dayclose.errors import DaycloseError
from dayclose.generate.writer import DAY, HOUR, BatchWriter, GenerateReport, iso, write_csv

MAX_SHOPS = 500  # seeds/shops.csv holds S-001 .. S-500

# Arrival of a sale, measured from the end of its sale day (incident 000's evidence):
# share of the day's final total arrived by then.
#   by 00:30 the next day   96.6%   (the nightly run sees batches complete by 00:00)
#   by +1 day 00:30         99.2%
#   by +2 days 10:00        99.9%
#   by +3 days 00:30       100.0%
SALES_LATENESS = (
    (0.966, None),  # online: seconds to minutes after the sale, before midnight
    (0.992, (0.0, 24.0)),  # offline overnight: during the next day
    (0.999, (24.0, 58.0)),  # offline a day or two: until +2 days 10:00
    (1.000, (58.0, 72.0)),  # the stragglers: before +3 days 00:00
)
RESEND_SHARE = 0.004  # a till resends an event it had already sent
MALFORMED_SHARE = 0.001  # a garbage line beside a real sale


def _malformed(rng: random.Random, event_id: str, shop: str, sold: int, received: int) -> str:
    """One garbage line of a random kind (none of them is a real sale)."""
    kind = rng.randrange(8)
    bad = f"{event_id}-x"
    good = {
        "event_id": bad,
        "shop_id": shop,
        "sold_at": iso(sold),
        "received_at": iso(received),
        "amount": "12.50",
    }
    if kind == 0:
        return json.dumps(good)[: rng.randrange(10, 60)]  # truncated JSON
    if kind == 1:
        del good[rng.choice(list(good))]
    elif kind == 2:
        good["sold_at"] = "23/11/2026 18:42"
    elif kind == 3:
        good["amount"] = "twelve fifty"
    elif kind == 4:
        good["amount"] = "-" + good["amount"]
    elif kind == 5:
        good["amount"] = "99999999.00"
    elif kind == 6:
        good["sold_at"] = iso(received + 3 * HOUR)  # sold after it was received
    else:
        good["shop_id"] = f"S-{rng.randrange(900, 1000)}"  # not in seeds/shops.csv
    return json.dumps(good)


def generate_sales(
    landing: Path,
    start: date,
    days: int,
    shops: int = 140,
    seed: int = 0,
    events_per_day: int | None = None,
    progress: Callable[[str], None] = console_progress,
) -> GenerateReport:
    """Write `days` days of till sales, from `start`, as they would arrive."""
    if not 1 <= shops <= MAX_SHOPS:
        raise DaycloseError(f"--shops {shops}: expected 1 to {MAX_SHOPS} (the shops of seeds/shops.csv)")
    per_day = events_per_day if events_per_day is not None else shops * 61
    started = time.monotonic()
    writer = BatchWriter(landing, "sales")
    truth: dict[tuple[str, str], list[int]] = {}
    events = 0
    first = calendar.timegm(start.timetuple())
    for offset in range(days):
        day_start = first + offset * DAY
        day_end = day_start + DAY
        sale_date = time.strftime("%Y-%m-%d", time.gmtime(day_start))
        rng = random.Random(f"{seed}/sales/{sale_date}")
        rand = rng.random
        for i in range(per_day):
            shop = f"S-{int(rand() * shops) + 1:03d}"
            sold = day_start + int(rand() * DAY)
            cents = 500 + int(rand() * 9001)
            u = rand()
            window = next(w for share, w in SALES_LATENESS if u < share)
            if window is None:
                received = sold + min(int(rand() * 600), day_end - 1 - sold)
            else:
                lo, hi = window
                received = day_end + int((lo + rand() * (hi - lo)) * HOUR)
            event_id = f"{sale_date.replace('-', '')}-{seed}-{i:08d}"
            head = f'{{"event_id": "{event_id}", "shop_id": "{shop}", "sold_at": "{iso(sold)}", '
            tail = f'"amount": "{cents // 100}.{cents % 100:02d}"}}\n'
            writer.write(received, f'{head}"received_at": "{iso(received)}", {tail}')
            if rand() < RESEND_SHARE:
                again = received + 600 + int(rand() * 6 * HOUR)
                writer.write(again, f'{head}"received_at": "{iso(again)}", {tail}')
            if rand() < MALFORMED_SHARE:
                writer.write(received, _malformed(rng, event_id, shop, sold, received) + "\n")
            cell = truth.get((sale_date, shop))
            if cell is None:
                cell = truth[(sale_date, shop)] = [0, 0]
            cell[0] += cents
            cell[1] += 1
        events += per_day
        writer.seal_before(day_end)  # nothing sold later can arrive before its own day
        rate = events / max(time.monotonic() - started, 1e-9)
        progress(f"sales {sale_date}: {per_day:,} events, {events:,} in all, {rate:,.0f} events/s")
    writer.seal_before(None)
    writer.fill_gaps(first, first + (days + 4) * DAY)
    truth_path = write_csv(
        landing / "truth" / "sales_daily_totals.csv",
        "sale_date,shop_id,sales_amount,sales_count",
        (
            f"{d},{shop},{cents // 100}.{cents % 100:02d},{count}"
            for (d, shop), (cents, count) in sorted(truth.items())
        ),
    )
    return GenerateReport(events, writer.lines, writer.sealed, time.monotonic() - started, truth_path)


def read_sales_truth(path: Path) -> dict[tuple[str, str], tuple[str, int]]:
    """The generator's ground truth: (sale_date, shop_id) -> (amount text, count)."""
    rows: dict[tuple[str, str], tuple[str, int]] = {}
    with open(path) as fh:
        next(fh)
        for line in fh:
            d, shop, amount, count = line.rstrip("\n").split(",")
            rows[(d, shop)] = (amount, int(count))
    return rows
