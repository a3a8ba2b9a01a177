"""Synthetic landing data that behaves like the incidents' evidence.

Deterministic for a seed, streaming (memory does not grow with the number of
events), and it writes the ground truth beside the landing so tests and
benchmarks can compare published numbers with what really happened.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

from flows.landing import MARKER

DAY = 86_400
HOUR = 3_600
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
PART_ROWS = 250_000  # lines per part file


def _iso(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


@dataclass
class _Part:
    name: str
    rows: int = 0
    sha: hashlib._Hash = field(default_factory=hashlib.sha256)


@dataclass
class _HourFolder:
    path: Path
    parts: list[_Part] = field(default_factory=list)
    handle: object | None = None


class BatchWriter:
    """Appends lines to arrival-hour folders; seals an hour with its _SUCCESS manifest."""

    def __init__(self, landing: Path, source: str, part_rows: int = PART_ROWS):
        self.root = landing / source
        self.source = source
        self.part_rows = part_rows
        self.open: dict[int, _HourFolder] = {}
        self.sealed = 0
        self.lines = 0

    def write(self, arrival_ts: int, line: str) -> None:
        hour = arrival_ts - arrival_ts % HOUR
        folder = self.open.get(hour)
        if folder is None:
            path = self.root / f"arrived={time.strftime('%Y-%m-%dT%H', time.gmtime(hour))}"
            if path.exists():
                raise SystemExit(f"dayclose generate: {path} already exists; use a new --landing")
            path.mkdir(parents=True)
            folder = self.open[hour] = _HourFolder(path)
        if not folder.parts or folder.parts[-1].rows >= self.part_rows:
            if folder.handle is not None:
                folder.handle.close()
            part = _Part(f"part-{len(folder.parts):04d}.jsonl")
            folder.parts.append(part)
            folder.handle = open(folder.path / part.name, "wb")  # noqa: SIM115
        part = folder.parts[-1]
        data = line.encode()
        folder.handle.write(data)
        part.sha.update(data)
        part.rows += 1
        self.lines += 1

    def seal_before(self, ts: int | None = None) -> None:
        """Close every hour that ends at or before `ts` (all, when None) and write its marker."""
        for hour in sorted(self.open):
            if ts is not None and hour + HOUR > ts:
                continue
            folder = self.open.pop(hour)
            if folder.handle is not None:
                folder.handle.close()
            manifest = {
                "source": self.source,
                "batch": folder.path.name.split("=", 1)[1],
                "files": [
                    {"name": p.name, "rows": p.rows, "sha256": p.sha.hexdigest()} for p in folder.parts
                ],
            }
            tmp = folder.path / (MARKER + ".tmp")
            tmp.write_text(json.dumps(manifest, indent=1) + "\n")
            os.replace(tmp, folder.path / MARKER)
            self.sealed += 1


def _malformed(rng: random.Random, event_id: str, shop: str, sold: int, received: int) -> str:
    """One garbage line of a random kind (none of them is a real sale)."""
    kind = rng.randrange(8)
    bad = f"{event_id}-x"
    good = {
        "event_id": bad,
        "shop_id": shop,
        "sold_at": _iso(sold),
        "received_at": _iso(received),
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
        good["sold_at"] = _iso(received + 3 * HOUR)  # sold after it was received
    else:
        good["shop_id"] = f"S-{rng.randrange(900, 1000)}"  # not in seeds/shops.csv
    return json.dumps(good)


@dataclass
class GenerateReport:
    events: int
    lines: int
    batches: int
    seconds: float
    truth_path: Path


def generate_sales(
    landing: Path,
    start: date,
    days: int,
    shops: int = 140,
    seed: int = 0,
    events_per_day: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> GenerateReport:
    """Write `days` days of till sales, from `start`, as they would arrive."""
    if not 1 <= shops <= MAX_SHOPS:
        raise SystemExit(f"dayclose generate: --shops must be 1..{MAX_SHOPS} (seeds/shops.csv)")
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
            head = f'{{"event_id": "{event_id}", "shop_id": "{shop}", "sold_at": "{_iso(sold)}", '
            tail = f'"amount": "{cents // 100}.{cents % 100:02d}"}}\n'
            writer.write(received, f'{head}"received_at": "{_iso(received)}", {tail}')
            if rand() < RESEND_SHARE:
                again = received + 600 + int(rand() * 6 * HOUR)
                writer.write(again, f'{head}"received_at": "{_iso(again)}", {tail}')
            if rand() < MALFORMED_SHARE:
                writer.write(received, _malformed(rng, event_id, shop, sold, received) + "\n")
            cell = truth.get((sale_date, shop))
            if cell is None:
                cell = truth[(sale_date, shop)] = [0, 0]
            cell[0] += cents
            cell[1] += 1
        events += per_day
        writer.seal_before(day_end)  # nothing sold later can arrive before its own day
        if progress:
            rate = events / max(time.monotonic() - started, 1e-9)
            progress(f"sales {sale_date}: {per_day:,} events, {events:,} in all, {rate:,.0f} events/s")
    writer.seal_before(None)
    truth_path = landing / "truth" / "sales_daily_totals.csv"
    truth_path.parent.mkdir(parents=True, exist_ok=True)
    with open(truth_path, "w") as fh:
        fh.write("sale_date,shop_id,sales_amount,sales_count\n")
        for (sale_date, shop), (cents, count) in sorted(truth.items()):
            fh.write(f"{sale_date},{shop},{cents // 100}.{cents % 100:02d},{count}\n")
    return GenerateReport(events, writer.lines, writer.sealed, time.monotonic() - started, truth_path)


def read_truth(path: Path) -> dict[tuple[str, str], tuple[str, int]]:
    """The generator's ground truth: (sale_date, shop_id) -> (amount text, count)."""
    rows: dict[tuple[str, str], tuple[str, int]] = {}
    with open(path) as fh:
        next(fh)
        for line in fh:
            d, shop, amount, count = line.rstrip("\n").split(",")
            rows[(d, shop)] = (amount, int(count))
    return rows


def stderr_progress(message: str) -> None:
    print(f"  {datetime.now():%H:%M:%S} {message}", file=sys.stderr, flush=True)


def parse_date(text: str) -> date:
    return datetime.strptime(text, "%Y-%m-%d").date()
