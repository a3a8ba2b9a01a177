"""A rising dead-letter rate per plant is itself an alert (a sensor or gateway failing).

Reads the dead-letter stream in order and counts, per plant, dead letters per minute of
arrival. An alert opens when a plant's minute reaches DAYCLOSE_DEAD_LETTER_ALERT_PER_MINUTE
(30) and closes at the end of the first complete minute below it. One consumer sees every
plant, so the count is exact whichever monitor worker dead-lettered the readings; it runs
in monitor worker 0 and checkpoints like a partition.
"""

from __future__ import annotations

import json
import os
import time
import zlib

from dayclose.errors import DaycloseError
from dayclose.generate.writer import iso_ms
from dayclose.stream.config import StreamSettings
from dayclose.stream.partition import Outputs

MINUTE_MS = 60_000
GRACE_MS = 5_000  # a minute is over this long after its end (delivery lag)


def alert_threshold() -> int:
    text = os.environ.get("DAYCLOSE_DEAD_LETTER_ALERT_PER_MINUTE", "30")
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise DaycloseError(f"DAYCLOSE_DEAD_LETTER_ALERT_PER_MINUTE={text!r}: expected a whole number >= 1")
    return value


class DeadLetterRate:
    """Per plant and minute of arrival: dead letters counted; alerts opened and closed."""

    def __init__(self, settings: StreamSettings, per_minute: int | None = None, clock=time.time):
        self.settings = settings
        self.per_minute = per_minute or alert_threshold()
        self.clock = clock
        self.offset_ms = int(settings.clock_offset_s * 1000)
        self.counts: dict[str, dict[int, int]] = {}  # plant -> minute start -> dead letters
        self.hot: dict[str, int] = {}  # plant with an open alert -> its latest minute at the threshold
        self.open: dict[str, dict] = {}
        self.last_seq = 0

    def snapshot(self) -> bytes:
        doc = {
            "last_seq": self.last_seq,
            "counts": {p: {str(m): n for m, n in c.items()} for p, c in self.counts.items()},
            "hot": self.hot,
            "open": self.open,
        }
        return zlib.compress(json.dumps(doc).encode(), 1)

    def restore(self, blob: bytes) -> None:
        doc = json.loads(zlib.decompress(blob))
        self.last_seq = int(doc["last_seq"])
        self.counts = {p: {int(m): n for m, n in c.items()} for p, c in doc["counts"].items()}
        self.hot, self.open = doc["hot"], doc["open"]

    def _close(self, plant: str, out: Outputs) -> None:
        end = self.hot.pop(plant) + 2 * MINUTE_MS  # the end of the first quiet minute
        record = {**self.open.pop(plant), "closed_at": iso_ms(end / 1000), "cleared_at": iso_ms(end / 1000)}
        out.alerts.append({**record, "event": "close"})

    def process(self, subject: str, payload: bytes, stream_seq: int, stored_ms: int) -> Outputs:
        out = Outputs()
        if stream_seq <= self.last_seq:
            out.skipped = True
            return out
        self.last_seq = stream_seq
        plant = subject.split(".")[2]
        arrival = stored_ms + self.offset_ms
        minute = arrival - arrival % MINUTE_MS
        if plant in self.hot and minute > self.hot[plant] + MINUTE_MS:
            self._close(plant, out)
        counts = self.counts.setdefault(plant, {})
        for old in [m for m in counts if m < minute - MINUTE_MS]:
            del counts[old]
        counts[minute] = counts.get(minute, 0) + 1
        if counts[minute] >= self.per_minute:
            if plant not in self.open:
                now_ms = int(self.clock() * 1000)
                record = {
                    "alert_id": f"{plant}/live/dead_letter_rate/-/-/{iso_ms(minute / 1000)}",
                    "line_id": None,
                    "plant_id": plant,
                    "sku": None,
                    "detector": "dead_letter_rate",
                    "sensor": None,
                    "direction": "high",
                    "lane": "live",
                    "paged": True,
                    "opened_at": iso_ms(arrival / 1000),
                    "opened_plc_seq": None,
                    "opened_value": float(counts[minute]),
                    "threshold": float(self.per_minute),
                    "raised_at": iso_ms((now_ms + self.offset_ms) / 1000),
                    "latency_ms": float(now_ms - stored_ms),
                    "reading_to_alert_ms": None,
                    "closed_at": None,
                    "closed_plc_seq": None,
                    "cleared_at": None,
                }
                self.open[plant] = record
                out.alerts.append({**record, "event": "open"})
            self.hot[plant] = minute
        return out

    def tick(self) -> Outputs:
        """Close the alerts of plants that have had a complete quiet minute by now."""
        out = Outputs()
        now = int(self.clock() * 1000) + self.offset_ms
        for plant in [p for p, m in self.hot.items() if now - GRACE_MS >= m + 2 * MINUTE_MS]:
            self._close(plant, out)
        return out
