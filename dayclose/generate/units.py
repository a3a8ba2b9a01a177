"""Synthetic brewery line units that behave like incident 003's evidence.

Plants go offline for hours and replay their backlog on reconnect (late, out of order,
across midnight), some replay it a second time in full, producers retry single lines,
sensors stick or spray garbage, and a few lines are malformed. Deterministic for a seed,
streaming, with the ground truth written beside the landing.
"""

from __future__ import annotations

import calendar
import csv
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from dayclose.console import progress as console_progress
from dayclose.errors import DaycloseError
from dayclose.generate.writer import DAY, HOUR, BatchWriter, GenerateReport, iso, iso_ms, write_csv
from dayclose.settings import PROJECT_DIR

SEEDS_DIR = PROJECT_DIR / "seeds"
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


def _unit_malformed(rng: random.Random, line: LineRef, seq: int, event: float, received: float) -> str:
    kind = rng.randrange(9)
    doc: dict[str, object] = {
        "line_id": line.line_id,
        "plc_seq": seq,
        "sku": "PILS-330-BTL",
        "event_at": iso_ms(event),
        "received_at": iso_ms(received),
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
        doc["event_at"] = iso_ms(received + 7200)  # after it was received
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
    progress: Callable[[str], None] = console_progress,
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
        raise DaycloseError(f"--plants {plants}: expected at least 1")
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
                    f'"event_at": "{iso_ms(event)}", "received_at": "RECEIVED", '
                    f'"verdict": "{"good" if good else "reject"}", "fill_level_ml": {readings[0]:.1f}, '
                    f'"capper_torque_nm": {readings[1]:.2f}, "temperature_c": {readings[2]:.1f}}}\n'
                )
                writer.write(int(received), body.replace("RECEIVED", iso_ms(received)))
                if rand() < RETRY_SHARE:
                    writer.write(int(received), body.replace("RECEIVED", iso_ms(received)))
                if outage is not None and outage.replayed_again_at is not None:
                    again = outage.replayed_again_at + rand() * 600
                    writer.write(int(again), body.replace("RECEIVED", iso_ms(again)))
                if rand() < UNIT_MALFORMED_SHARE:
                    writer.write(int(received), _unit_malformed(rng, line, seq, event, received) + "\n")
                if good:
                    key = (day, sku.sku)
                    truth[key] = truth.get(key, 0) + 1
            units += per_line
        previous = today
        writer.seal_before(day_start + DAY)
        rate = units / max(time.monotonic() - started, 1e-9)
        progress(f"units {day}: {per_line * len(lines):,} units, {units:,} in all, {rate:,.0f} units/s")
    writer.seal_before(None)
    writer.fill_gaps(first, first + (days + 1) * DAY)
    truth_path = write_csv(
        landing / "truth" / "units_daily_good.csv",
        "production_date,sku,good_units",
        (f"{d},{sku},{n}" for (d, sku), n in sorted(truth.items())),
    )
    write_csv(
        landing / "truth" / "units_outages.csv",
        "plant_id,offline_from,online_at,replayed_again_at",
        (
            f"{o.plant_id},{iso(o.offline_from)},{iso(o.online_at)},"
            f"{iso(o.replayed_again_at) if o.replayed_again_at else ''}"
            for o in outages
        ),
    )
    return GenerateReport(units, writer.lines, writer.sealed, time.monotonic() - started, truth_path)


def read_units_truth(path: Path) -> dict[tuple[str, str], int]:
    """The generator's ground truth: (production_date, sku) -> good units."""
    with open(path) as fh:
        next(fh)
        return {(d, sku): int(n) for d, sku, n in (line.rstrip("\n").split(",") for line in fh)}
