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
from collections.abc import Callable, Iterable
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

    def fill_gaps(self, start_ts: int, end_ts: int) -> None:
        """Seal an empty batch for every hour in [start_ts, end_ts) that has none.

        The landing contract has one folder per arrival hour, quiet hours included, so a
        consumer can tell "nothing arrived" from "not delivered yet".
        """
        for hour in range(start_ts - start_ts % HOUR, end_ts, HOUR):
            path = self.root / f"arrived={time.strftime('%Y-%m-%dT%H', time.gmtime(hour))}"
            if not path.exists():
                path.mkdir(parents=True)
                self.open[hour] = _HourFolder(path)
        self.seal_before(None)

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
    writer.fill_gaps(first, first + (days + 4) * DAY)
    truth_path = _write_csv(
        landing / "truth" / "sales_daily_totals.csv",
        "sale_date,shop_id,sales_amount,sales_count",
        (
            f"{d},{shop},{cents // 100}.{cents % 100:02d},{count}"
            for (d, shop), (cents, count) in sorted(truth.items())
        ),
    )
    return GenerateReport(events, writer.lines, writer.sealed, time.monotonic() - started, truth_path)


def _write_csv(path: Path, header: str, rows: Iterable[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fh.write(header + "\n")
        for row in rows:
            fh.write(row + "\n")
    return path


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


# -- brewery line units (incident 003) -------------------------------------------------------
SEEDS_DIR = Path(__file__).resolve().parent.parent / "seeds"
GOOD_SHARE = 0.97
OUTAGE_SHARE = 0.04  # share of plants that go offline on a given day
FULL_REPLAY_SHARE = 0.25  # share of outages after which the plant replays its backlog again
RETRY_SHARE = 0.002  # producer retries: the same line sent twice
GARBAGE_SHARE = 0.001  # a sensor reading that is out-of-range garbage
STUCK_SHARE = 0.05  # share of line-days with a sensor stuck for a run of units
UNIT_MALFORMED_SHARE = 0.0005
PLC_DAY = 10_000_000  # plc_seq = days since 2020-01-01 * PLC_DAY + unit number of the day
PLC_EPOCH = date(2020, 1, 1)


@dataclass(frozen=True)
class LineRef:
    line_id: str
    plant_id: str
    kind: str
    commissioned_at: str


@dataclass(frozen=True)
class SkuRef:
    sku: str
    container: str
    volume_ml: float
    temperature: tuple[float, float]
    torque: tuple[float, float]


def read_reference(plants: int) -> tuple[list[LineRef], dict[str, list[SkuRef]]]:
    """The lines of the first `plants` plants and the SKUs by container, from the dbt seeds."""
    import csv

    with open(SEEDS_DIR / "lines.csv") as fh:
        lines = [
            LineRef(r["line_id"], r["plant_id"], r["kind"], r["commissioned_at"]) for r in csv.DictReader(fh)
        ]
    wanted = sorted({ln.plant_id for ln in lines})[:plants]
    lines = [ln for ln in lines if ln.plant_id in set(wanted)]
    with open(SEEDS_DIR / "sensor_specs.csv") as fh:
        specs = {r["sku"]: r for r in csv.DictReader(fh)}
    by_container: dict[str, list[SkuRef]] = {}
    with open(SEEDS_DIR / "skus.csv") as fh:
        for r in csv.DictReader(fh):
            spec = specs[r["sku"]]
            by_container.setdefault(r["container"], []).append(
                SkuRef(
                    r["sku"],
                    r["container"],
                    float(r["volume_ml"]),
                    (float(spec["temperature_min_c"]), float(spec["temperature_max_c"])),
                    (float(spec["capper_torque_min_nm"]), float(spec["capper_torque_max_nm"])),
                )
            )
    return lines, by_container


@dataclass(frozen=True)
class Outage:
    plant_id: str
    offline_from: int
    online_at: int
    replayed_again_at: int | None


def plant_outage(seed: int, plant_id: str, day_start: int, forced: Outage | None = None) -> Outage | None:
    """The outage that starts on this day at this plant, if any (deterministic).

    `forced` is a scripted outage of one plant; it takes the place of that plant's random one.
    """
    if forced is not None and forced.plant_id == plant_id:
        return forced if day_start <= forced.offline_from < day_start + DAY else None
    rng = random.Random(f"{seed}/outage/{day_start}/{plant_id}")
    if rng.random() >= OUTAGE_SHARE:
        return None
    start = day_start + int(rng.random() * DAY)
    end = start + int((1 + rng.random() * 7) * HOUR)
    again = end + int((1 + rng.random() * 2) * HOUR) if rng.random() < FULL_REPLAY_SHARE else None
    return Outage(plant_id, start, end, again)


def _iso_ms(t: float) -> str:
    whole = int(t)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((t - whole) * 1000):03d}Z"


def _unit_malformed(rng: random.Random, line: LineRef, seq: int, event: float, received: float) -> str:
    kind = rng.randrange(9)
    doc: dict[str, object] = {
        "line_id": line.line_id,
        "plc_seq": seq,
        "sku": "PILS-330-BTL",
        "event_at": _iso_ms(event),
        "received_at": _iso_ms(received),
        "verdict": "good",
        "fill_level_ml": 330.0,
        "capper_torque_nm": 2.1,
        "temperature_c": 3.9,
    }
    if kind == 0:
        return json.dumps(doc)[: rng.randrange(10, 80)]
    if kind == 1:
        doc["line_id"] = f"L-{rng.randrange(900, 999)}-1"
    elif kind == 2:
        doc["sku"] = "MYSTERY-BREW"
    elif kind == 3:
        del doc["plc_seq"]
    elif kind == 4:
        doc["plc_seq"] = f"{seq}a"
    elif kind == 5:
        doc["event_at"] = "2001-01-01T00:00:00.000Z"  # before any line was commissioned
    elif kind == 6:
        doc["event_at"] = _iso_ms(received + 7200)  # after it was received
    elif kind == 7:
        doc["verdict"] = "maybe"
    else:
        doc["temperature_c"] = "ERR"
    return json.dumps(doc)


def generate_units(
    landing: Path,
    start: date,
    days: int,
    plants: int = 300,
    seed: int = 0,
    units_per_day: int | None = None,
    progress: Callable[[str], None] | None = None,
    forced_outage: Outage | None = None,
) -> GenerateReport:
    """Write `days` days of finished units from the lines of `plants` plants, as they would arrive.

    Plants go offline for hours and replay their backlog on reconnect (late, out of order,
    across midnight), some replay it a second time in full, producers retry single lines,
    sensors stick or spray garbage, and a few lines are malformed. The ground truth (good
    units per production day and SKU) and the outages are written to <landing>/truth/.
    `forced_outage` is one scripted outage (for the demo), in place of that plant's random ones.
    """
    lines, skus = read_reference(plants)
    if not lines:
        raise SystemExit("dayclose generate: --plants must be at least 1")
    per_line = max(1, (units_per_day if units_per_day is not None else len(lines) * 200) // len(lines))
    started = time.monotonic()
    writer = BatchWriter(landing, "units")
    truth: dict[tuple[str, str], int] = {}
    outages: list[Outage] = []
    first = calendar.timegm(start.timetuple())
    units = 0
    plant_ids = sorted({ln.plant_id for ln in lines})
    previous: dict[str, Outage | None] = {
        p: plant_outage(seed, p, first - DAY, forced_outage) for p in plant_ids
    }
    for offset in range(days):
        day_start = first + offset * DAY
        day = time.strftime("%Y-%m-%d", time.gmtime(day_start))
        day_number = (date.fromisoformat(day) - PLC_EPOCH).days
        today = {p: plant_outage(seed, p, day_start, forced_outage) for p in plant_ids}
        outages.extend(o for o in today.values() if o is not None)
        for line in lines:
            rng = random.Random(f"{seed}/units/{day}/{line.line_id}")
            rand = rng.random
            shift_skus = [rng.choice(skus["bottle" if line.kind == "bottling" else "can"]) for _ in range(3)]
            stuck_from = stuck_to = -1
            stuck_sensor = 0
            if rand() < STUCK_SHARE:
                stuck_from = int(rand() * per_line)
                stuck_to = stuck_from + 300 + int(rand() * 2700)
                stuck_sensor = rng.randrange(3)
            stuck_value = None
            down = [o for o in (previous[line.plant_id], today[line.plant_id]) if o is not None]
            for i in range(per_line):
                event = day_start + (i + rand()) * DAY / per_line
                sku = shift_skus[min(2, int((event - day_start) // (8 * HOUR)))]
                good = rand() < GOOD_SHARE
                readings = [
                    sku.volume_ml + 0.3 + rng.gauss(0, 0.8),
                    sum(sku.torque) / 2 + rng.gauss(0, 0.08),
                    sum(sku.temperature) / 2 + rng.gauss(0, 0.4),
                ]
                if stuck_from <= i < stuck_to:
                    if stuck_value is None:
                        stuck_value = readings[stuck_sensor]
                    readings[stuck_sensor] = stuck_value
                if rand() < GARBAGE_SHARE:
                    k = rng.randrange(3)
                    readings[k] = rng.choice((-999.0, 0.0, 9999.9))
                outage = next((o for o in down if o.offline_from <= event < o.online_at), None)
                received = (outage.online_at + rand() * 600) if outage else event + 1 + rand() * 29
                seq = day_number * PLC_DAY + i
                body = (
                    f'{{"line_id": "{line.line_id}", "plc_seq": {seq}, "sku": "{sku.sku}", '
                    f'"event_at": "{_iso_ms(event)}", "received_at": "RECEIVED", '
                    f'"verdict": "{"good" if good else "reject"}", "fill_level_ml": {readings[0]:.1f}, '
                    f'"capper_torque_nm": {readings[1]:.2f}, "temperature_c": {readings[2]:.1f}}}\n'
                )
                writer.write(int(received), body.replace("RECEIVED", _iso_ms(received)))
                if rand() < RETRY_SHARE:
                    writer.write(int(received), body.replace("RECEIVED", _iso_ms(received)))
                if outage is not None and outage.replayed_again_at is not None:
                    again = outage.replayed_again_at + rand() * 600
                    writer.write(int(again), body.replace("RECEIVED", _iso_ms(again)))
                if rand() < UNIT_MALFORMED_SHARE:
                    writer.write(int(received), _unit_malformed(rng, line, seq, event, received) + "\n")
                if good:
                    key = (day, sku.sku)
                    truth[key] = truth.get(key, 0) + 1
            units += per_line
        previous = today
        writer.seal_before(day_start + DAY)
        if progress:
            rate = units / max(time.monotonic() - started, 1e-9)
            progress(f"units {day}: {per_line * len(lines):,} units, {units:,} in all, {rate:,.0f} units/s")
    writer.seal_before(None)
    writer.fill_gaps(first, first + (days + 1) * DAY)
    truth_path = _write_csv(
        landing / "truth" / "units_daily_good.csv",
        "production_date,sku,good_units",
        (f"{d},{sku},{n}" for (d, sku), n in sorted(truth.items())),
    )
    _write_csv(
        landing / "truth" / "units_outages.csv",
        "plant_id,offline_from,online_at,replayed_again_at",
        (
            f"{o.plant_id},{_iso(o.offline_from)},{_iso(o.online_at)},"
            f"{_iso(o.replayed_again_at) if o.replayed_again_at else ''}"
            for o in outages
        ),
    )
    return GenerateReport(units, writer.lines, writer.sealed, time.monotonic() - started, truth_path)


def read_units_truth(path: Path) -> dict[tuple[str, str], int]:
    """The generator's ground truth: (production_date, sku) -> good units."""
    with open(path) as fh:
        next(fh)
        return {(d, sku): int(n) for d, sku, n in (line.rstrip("\n").split(",") for line in fh)}
