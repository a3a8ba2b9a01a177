"""One partition's scoring: a message in, alerts and dead letters out (no NATS here).

For each message of a partition (one lane of it: live or backfill), in stream order:

1. a message already processed (stream sequence <= the last one) is a redelivery: skipped;
2. a payload that does not decode, or names a line, plant or SKU the plants do not have, is
   dead-lettered whole with its reason;
3. a reading with a sensor that is not a finite number, a verdict that is neither good nor
   reject, or an event time after its arrival (by more than a minute) is dead-lettered alone;
4. the rest go to a lane: backfill readings to `backfill`; live readings to `late` when they
   are more than the allowed lateness behind their line's event-time watermark or reached the
   server more than a minute after they were taken, else to `live` (which moves the watermark);
5. within a lane, a reading whose plc_seq is not above the highest already scored is a copy
   (a producer retry, a replay sent twice): skipped, so nothing is scored twice; a live
   reading at or below the highest its line has had on either path (`consumed`) too;
6. the detectors score the rest (detectors.score) and every alarm that opens or closes becomes
   an alert record; only `live` alerts are paged, the others are historical.

The whole state (lanes, open alerts, last stream sequence, counters) is a snapshot the
monitor checkpoints before it acknowledges: after a crash the same messages give the same
alerts with the same ids.

`process_live` scores a message of the live path (live.py: the gateway's core NATS copy, which
no Raft election holds up) by the same steps but the dead letters (left to the stored copy,
which has a stream sequence to name them by), and only when it continues its line: its first
plc_seq at most one above the highest the line has had (`consumed`, per line, moved by both
paths). Otherwise it returns None and the message waits (live.LiveFeed), so a reading seen live
never makes an older one not yet seen be taken for a copy: a line is scored in plc_seq order
whichever path brings each message.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from dayclose.generate.writer import iso_ms
from dayclose.stream import detectors, wire
from dayclose.stream.config import StreamSettings
from dayclose.stream.detectors import NEVER, Change, LaneState, Reference, Thresholds, score
from dayclose.stream.wire import SENSORS, Readings, WireError, decode, json_safe, rfc3339_ms

SNAPSHOT_VERSION = 1


@dataclass
class DeadLetter:
    plant_id: str
    line_id: str
    reason: str
    payload: bytes
    msg_id: str  # Nats-Msg-Id: a redelivered message dead-letters the same thing once
    source_subject: str
    source_seq: int


@dataclass
class Outputs:
    alerts: list[dict] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    scored: int = 0
    skipped: bool = False
    paged: bool = False  # its paged alerts were already paged (the live path pages at once)
    published_ms: int | None = None  # when the gateway sent it (its sent_ms), else when it arrived


def warm_up() -> None:
    """Load the compiled parts of scoring (numba; compiled on first use after an install and
    cached beside the modules), so the first message does not wait for them."""
    detectors.warm_up()
    wire.warm_up()


class PartitionProcessor:
    """The state and scoring of one lane of one partition; see the module docstring."""

    def __init__(
        self,
        settings: StreamSettings,
        reference: Reference,
        thresholds: Thresholds | None = None,
        clock=time.time,
    ):
        self.settings = settings
        self.reference = reference
        self.th = thresholds or Thresholds()
        self.clock = clock
        self.offset_ms = int(settings.clock_offset_s * 1000)
        self.lanes: dict[str, LaneState] = {}  # "<line>|<lane>" -> state
        self.last_seq = 0
        self.consumed: dict[str, int] = {}  # line -> highest plc_seq of its live subject, either path
        self.counters = {"messages": 0, "readings": 0, "scored": 0, "dead_letters": 0, "copies": 0, "late": 0}

    # -- checkpoint ---------------------------------------------------------------------
    def snapshot(self) -> bytes:
        doc = {
            "version": SNAPSHOT_VERSION,
            "last_seq": self.last_seq,
            "consumed": self.consumed,
            "counters": self.counters,
            "lanes": {k: s.to_dict() for k, s in self.lanes.items()},
        }
        return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 1)

    def restore(self, blob: bytes) -> None:
        doc = json.loads(zlib.decompress(blob))
        if doc.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"checkpoint version {doc.get('version')}, expected {SNAPSHOT_VERSION}")
        self.last_seq = int(doc["last_seq"])
        self.counters = doc["counters"]
        self.lanes = {k: LaneState.from_dict(v) for k, v in doc["lanes"].items()}
        self.consumed = {k: int(v) for k, v in doc.get("consumed", {}).items()}
        if "consumed" not in doc:  # a checkpoint from before the live path: the lanes say it
            for key, state in self.lanes.items():
                line, _, lane = key.partition("|")
                if lane in ("live", "late") and state.hwm >= 0:
                    self.consumed[line] = max(self.consumed.get(line, -1), state.hwm)

    def lane(self, line_id: str, lane: str) -> LaneState:
        key = f"{line_id}|{lane}"
        state = self.lanes.get(key)
        if state is None:
            state = self.lanes[key] = LaneState()
        return state

    # -- one message ----------------------------------------------------------------------
    def process(self, subject: str, payload: bytes, stream_seq: int, stored_ms: int) -> Outputs:
        """Score one stored message (stored_ms: the server's clock when it stored it)."""
        out = Outputs()
        if stream_seq <= self.last_seq:
            out.skipped = True
            return out
        self.last_seq = stream_seq
        self.counters["messages"] += 1
        lane_kind, _, plant_id, line_id = self.settings.parse_stored(subject)
        arrival_ms = stored_ms + self.offset_ms

        def dead(reason: str, body: bytes, index: str) -> None:
            out.dead.append(
                DeadLetter(plant_id, line_id, reason, body, f"{stream_seq}/{index}", subject, stream_seq)
            )

        try:
            batch = decode(payload)
        except WireError as exc:
            dead(str(exc), payload, "all")
            self.counters["dead_letters"] += 1
            return out
        spec = self.reference.specs.get(batch.sku)
        known_plant = self.reference.plant_of_line.get(batch.line_id)
        problem = None
        if known_plant is None:
            problem = f"unknown line_id {batch.line_id}"
        elif batch.line_id != line_id or known_plant != plant_id:
            problem = (
                f"line_id {batch.line_id} of {known_plant} sent on the subject of {line_id} of {plant_id}"
            )
        elif spec is None:
            problem = f"unknown sku {batch.sku}"
        n = len(batch)
        self.counters["readings"] += n
        if problem:
            dead(problem, payload, "all")
            self.counters["dead_letters"] += n
            return out

        valid = self._dead_readings(batch, arrival_ms, dead)
        self.counters["dead_letters"] += n - int(valid.sum())
        out.published_ms = batch.sent_ms - self.offset_ms if batch.sent_ms else stored_ms
        if lane_kind == "backfill":
            out.scored += self._score(batch, valid, "backfill", spec, plant_id, stored_ms, out)
            return out
        self._live(batch, valid, arrival_ms, spec, plant_id, stored_ms, out)
        return out

    def process_live(self, subject: str, payload: bytes, received_ms: int) -> Outputs | None:
        """Score one message of the live path (the gateway's core NATS copy, received_ms: when it
        got here, the machine's clock), or None when it does not continue its line yet (a
        message before it not seen on either path)."""
        out = Outputs(paged=True, published_ms=received_ms)
        _lane, _k, plant_id, line_id = self.settings.parse_stored(subject)
        try:
            batch = decode(payload)
        except WireError:
            out.skipped = True  # the stored copy dead-letters it
            return out
        spec = self.reference.specs.get(batch.sku)
        known_plant = self.reference.plant_of_line.get(batch.line_id)
        if spec is None or known_plant != plant_id or batch.line_id != line_id or not len(batch):
            out.skipped = True
            return out
        consumed = self.consumed.get(line_id)
        lo, hi = int(batch.seq.min()), int(batch.seq.max())
        if consumed is not None and hi <= consumed:
            out.skipped = True  # a copy: scored already, on this path or the other
            return out
        if consumed is None or lo > consumed + 1:
            return None  # readings before it not seen yet (a line's first message: the stored path)
        if batch.sent_ms:
            out.published_ms = batch.sent_ms - self.offset_ms
        valid = self._dead_readings(batch, received_ms + self.offset_ms, lambda *_a: None)
        self._live(batch, valid, received_ms + self.offset_ms, spec, plant_id, out.published_ms, out)
        return out

    def _live(
        self,
        batch: Readings,
        valid: np.ndarray,
        arrival_ms: int,
        spec,
        plant_id: str,
        stored_ms: int,
        out: Outputs,
    ) -> None:
        """Route a live message's valid readings not yet had on either path to `late` or `live`
        and score them; its line has had it all after this."""
        line_id = batch.line_id
        consumed = self.consumed.get(line_id, -1)
        seq = batch.seq
        prior = np.maximum.accumulate(np.concatenate(([consumed], seq)))[:-1]
        fresh = seq > prior
        if not fresh.all():
            self.counters["copies"] += int((valid & ~fresh).sum())
            valid = valid & fresh
        self.consumed[line_id] = max(consumed, int(seq.max()))
        live_state = self.lane(line_id, "live")
        late = (batch.event_ms < live_state.watermark_ms - self.th.allowed_lateness_ms) | (
            arrival_ms - batch.event_ms > self.th.max_live_delay_ms
        )
        late &= valid
        if late.any():
            self.counters["late"] += int(late.sum())
            out.scored += self._score(batch, late, "late", spec, plant_id, stored_ms, out)
        on_time = valid & ~late
        if on_time.any():
            live_state.watermark_ms = max(live_state.watermark_ms, int(batch.event_ms[on_time].max()))
            out.scored += self._score(batch, on_time, "live", spec, plant_id, stored_ms, out)

    def _dead_readings(self, batch: Readings, arrival_ms: int, dead) -> np.ndarray:
        """Mark readings that cannot be scored, dead-letter each with its reason; the valid mask."""
        finite = np.isfinite(batch.sensors).all(axis=0)
        verdict_ok = batch.verdict <= 1
        in_time = batch.event_ms <= arrival_ms + self.th.future_tolerance_ms
        valid = finite & verdict_ok & in_time
        for i in batch.problems:
            valid[i] = False
        if valid.all():
            return valid
        stamps = rfc3339_ms(batch.event_ms)
        for i in np.nonzero(~valid)[0]:
            i = int(i)
            if i in batch.problems:
                reason = batch.problems[i]
                body = batch.raw[i] if batch.raw is not None else b""
            else:
                if not finite[i]:
                    k = int(np.nonzero(~np.isfinite(batch.sensors[:, i]))[0][0])
                    reason = f"{SENSORS[k]}: {json_safe(float(batch.sensors[k, i]))}"
                elif not verdict_ok[i]:
                    reason = f"verdict code {int(batch.verdict[i])} (expected 1 good or 0 reject)"
                else:
                    ahead = (int(batch.event_ms[i]) - arrival_ms) / 3_600_000
                    reason = f"event_at {stamps[i]} is {ahead:.1f} h after the reading reached the server"
                body = json.dumps(
                    {
                        "line_id": batch.line_id,
                        "plc_seq": int(batch.seq[i]),
                        "sku": batch.sku,
                        "event_at": stamps[i],
                        "verdict": int(batch.verdict[i]),
                        **{s: json_safe(float(batch.sensors[k, i])) for k, s in enumerate(SENSORS)},
                    }
                ).encode()
            dead(reason, body, str(i))
        return valid

    def _score(
        self, batch: Readings, mask: np.ndarray, lane: str, spec, plant_id: str, stored_ms: int, out: Outputs
    ) -> int:
        state = self.lane(batch.line_id, lane)
        seq = batch.seq
        if mask.all() and seq[0] > state.hwm and (seq[1:] > seq[:-1]).all():  # the usual case
            idx = np.arange(len(seq))
            x = batch.sensors
        else:
            seq = seq[mask]
            prior = np.maximum.accumulate(np.concatenate(([state.hwm], seq)))[:-1]
            fresh = seq > prior
            copies = len(seq) - int(fresh.sum())
            if copies:
                self.counters["copies"] += copies
                if not fresh.any():
                    return 0
            idx = np.nonzero(mask)[0][fresh]
            x = batch.sensors[:, idx]
        state.hwm = int(batch.seq[idx[-1]])  # fresh readings rise: the last is the highest
        changes = score(state, spec, self.th, x)
        self.counters["scored"] += len(idx)
        if changes:
            now_ms = int(self.clock() * 1000)
            for change in changes:
                out.alerts.append(self._alert(state, change, batch, idx, lane, plant_id, stored_ms, now_ms))
        return len(idx)

    def _alert(
        self,
        state: LaneState,
        change: Change,
        batch: Readings,
        idx: np.ndarray,
        lane: str,
        plant_id: str,
        stored_ms: int,
        now_ms: int,
    ) -> dict:
        i = int(idx[change.index])
        seq, event_ms = int(batch.seq[i]), int(batch.event_ms[i])
        raised = iso_ms((now_ms + self.offset_ms) / 1000)
        if change.opened:
            record = {
                "alert_id": f"{batch.line_id}/{lane}/{change.detector}/{change.sensor}/"
                f"{change.direction or '-'}/{seq}",
                "line_id": batch.line_id,
                "plant_id": plant_id,
                "sku": batch.sku,
                "detector": change.detector,
                "sensor": change.sensor,
                "direction": change.direction,
                "lane": lane,
                "paged": lane == "live",
                "opened_at": iso_ms(event_ms / 1000),
                "opened_plc_seq": seq,
                "opened_value": round(change.value, 4),
                "threshold": round(change.threshold, 4),
                "raised_at": raised,
                "latency_ms": float(now_ms - stored_ms),
                "reading_to_alert_ms": float(now_ms + self.offset_ms - event_ms),
                "closed_at": None,
                "closed_plc_seq": None,
                "cleared_at": None,
            }
            state.open[change.row] = record
            return {**record, "event": "open"}
        record = {
            **state.open.pop(change.row),
            "closed_at": iso_ms(event_ms / 1000),
            "closed_plc_seq": seq,
            "cleared_at": raised,
        }
        return {**record, "event": "close"}


def progress(checkpoints: list[bytes]) -> dict[str, dict]:
    """Per "line|lane": readings scored and the highest plc_seq scored, over the monitor's
    checkpoints (other units' checkpoints, such as the dead-letter rate's, are passed over)."""
    out: dict[str, dict] = {}
    for blob in checkpoints:
        doc = json.loads(zlib.decompress(blob))
        for key, lane in doc.get("lanes", {}).items():
            if lane["hwm"] >= 0 or lane["watermark_ms"] != NEVER:
                out[key] = {"scored": lane["scored"], "hwm": lane["hwm"], "open": len(lane["open"])}
    return out
