"""`dayclose archive`: the finance path reads the same stream and lands it for the nightly job.

A durable consumer of its own (`archive`, every partition and both lanes) writes each
reading as one line of the units landing contract into the folder of its arrival hour:

    <landing>/units/arrived=YYYY-MM-DDTHH/part-NNNN.jsonl      (received_at = the JetStream
                                                              message's stored time, so a
                                                              replayed backlog arrives when
                                                              it reached the server)

and acknowledges the messages only once their lines are written and fsynced. An hour is
sealed with its `_SUCCESS` manifest (rows and sha256 of every part, read back from disk;
written to a temporary file, fsynced, renamed, the folder fsynced) only when

- no message is waiting for an acknowledgement (num_ack_pending 0), and
- every message stored in that hour has been delivered: a later message was seen (the
  stream's order is its arrival order), or none is pending and the hour ended more than
  a grace (2 s, for clock skew) ago. Hours in which nothing arrived are sealed as empty batches.

Killed at any point and restarted, it loses nothing: unacknowledged messages come back
(consumers.align resets the consumer to its ack floor at once), a line cut short by the
kill is truncated away (its message was not acknowledged), new lines go to new part
files, and no marker is ever written over a partial hour. Messages written but not yet
acknowledged when it died are written again: duplicates, which the nightly job counts once
by (line_id, plc_seq). A message of an hour already sealed is not written again (sealing
required it to be acknowledged, so this can only be a copy).

On a cluster that loses a node it goes on without restarting: its connection moves to another
node, calls that fail while a leader is elected are retried, and a delivery lost in flight
(consumers.Continuity) resets the consumer to its ack floor at once, as on a restart, rather
than leaving the lost messages to the ack wait (which would also hold the hour's seal).

What a line holds when a reading cannot be a valid contract line (nothing dropped silently;
the nightly job dead-letters each with its reason):
- a sensor that is not a finite number: the value as a string ("NaN", "Infinity");
- a verdict code other than good/reject: "code N";
- a JSON line that is not a valid reading: the object as it came, plus received_at;
- a payload that does not decode at all: {"undecodable_payload": base64, "reason", "subject",
  "received_at"}.
The ops path never writes here, and a garbage reading cannot change the count.
"""

from __future__ import annotations

import asyncio
import base64
import calendar
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from dayclose.generate.writer import HOUR, PART_ROWS, iso_ms
from dayclose.loader.contract import BATCH_DIR, MARKER
from dayclose.stream.config import StreamSettings
from dayclose.stream.consumers import Continuity, ack_all, align, stored_ms
from dayclose.stream.failover import retrying, transient
from dayclose.stream.streams import connect
from dayclose.stream.wire import Readings, WireError, decode, json_safe, rfc3339_ms

HOUR_MS = HOUR * 1000
GRACE_MS = 2_000
FETCH = 512
CONSUMER = "archive"


def _number(value: float, float32: bool) -> str:
    if not math.isfinite(value):
        return f'"{json_safe(value)}"'
    return f"{value:.7g}" if float32 else repr(value)


def contract_lines(batch: Readings, received: str) -> list[str]:
    """The landing lines of a message's readings (see the module docstring for the odd ones)."""
    stamps = rfc3339_ms(batch.event_ms)
    verdicts = ["good" if v == 1 else "reject" if v == 0 else f"code {v}" for v in batch.verdict.tolist()]
    f32 = batch.float32
    fill, torque, temp = ([_number(v, f32) for v in row] for row in batch.sensors.tolist())
    line, sku = json.dumps(batch.line_id), json.dumps(batch.sku)
    out = [
        f'{{"line_id": {line}, "plc_seq": {s}, "sku": {sku}, "event_at": "{t}", "received_at": "{received}", '
        f'"verdict": "{v}", "fill_level_ml": {f}, "capper_torque_nm": {q}, "temperature_c": {c}}}\n'
        for s, t, v, f, q, c in zip(batch.seq.tolist(), stamps, verdicts, fill, torque, temp, strict=True)
    ]
    for i, reason in batch.problems.items():
        out[i] = as_it_came(batch.raw[i] if batch.raw else b"", reason, received)
    return out


def as_it_came(raw: bytes, reason: str, received: str, subject: str | None = None) -> str:
    """A JSON object as it came (plus received_at), or the bytes wrapped when not an object."""
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        doc["received_at"] = received
        return json.dumps(json_safe(doc), allow_nan=False) + "\n"
    wrapped = {
        "undecodable_payload": base64.b64encode(raw).decode(),
        "reason": reason,
        "received_at": received,
    }
    if subject:
        wrapped["subject"] = subject
    return json.dumps(wrapped) + "\n"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def batch_id(hour_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H", time.gmtime(hour_ms // 1000))


@dataclass
class _Hour:
    path: Path
    next_part: int  # number of the next part file to create
    handle: object | None = None
    rows: int = 0  # rows in the current part file
    touched: bool = False


@dataclass
class ArchiveStats:
    messages: int = 0
    lines: int = 0
    sealed: list[str] = field(default_factory=list)
    skipped_sealed: int = 0
    realigned: int = 0  # consumer resets after a delivery lost in flight (a node lost)


class Archiver:
    """Writes the telemetry stream into arrival-hour batches; see the module docstring."""

    def __init__(self, settings: StreamSettings, landing: Path, part_rows: int = PART_ROWS, clock=time.time):
        self.settings = settings
        self.root = landing / "units"
        self.part_rows = part_rows
        self.clock = clock
        self.offset_ms = int(settings.clock_offset_s * 1000)
        self.hours: dict[int, _Hour] = {}  # unsealed hours (start, ms) -> files
        self.sealed: set[int] = set()
        self.first_hour: int | None = None  # the oldest hour of the landing: gaps after it are sealed empty
        self.next_to_seal: int | None = None  # every hour before it is sealed
        self.latest_arrival = -1  # plant-clock ms of the latest message written
        self.stats = ArchiveStats()

    # -- start ----------------------------------------------------------------------------
    def recover(self) -> None:
        """Take over what a previous run left: sealed hours, unsealed ones (cut lines truncated)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in self.root.glob(f".*.{MARKER}.tmp"):
            stale.unlink()
        for folder in sorted(self.root.iterdir()):
            m = BATCH_DIR.match(folder.name)
            if not folder.is_dir() or not m:
                continue
            hour = _utc_hour_ms(m.group(1))
            self.first_hour = hour if self.first_hour is None else min(self.first_hour, hour)
            if (folder / MARKER).exists():
                self.sealed.add(hour)
                continue
            parts = sorted(folder.glob("part-*.jsonl"))
            for part in parts:
                _truncate_partial_line(part)
            self.hours[hour] = _Hour(folder, next_part=_next_part(parts))

    # -- writing ------------------------------------------------------------------------------
    def _hour(self, hour: int) -> _Hour | None:
        if hour in self.sealed:
            return None
        folder = self.hours.get(hour)
        if folder is None:
            path = self.root / f"arrived={batch_id(hour)}"
            if (path / MARKER).exists():
                self.sealed.add(hour)
                return None
            path.mkdir(parents=True, exist_ok=True)
            folder = self.hours[hour] = _Hour(path, next_part=_next_part(sorted(path.glob("part-*.jsonl"))))
            self.first_hour = hour if self.first_hour is None else min(self.first_hour, hour)
        return folder

    def _append(self, folder: _Hour, lines: list[str]) -> None:
        while lines:
            if folder.handle is None or folder.rows >= self.part_rows:
                if folder.handle is not None:
                    self._sync(folder)
                    folder.handle.close()
                path = folder.path / f"part-{folder.next_part:04d}.jsonl"
                folder.next_part += 1
                folder.handle = open(path, "ab")  # noqa: SIM115 (kept open across batches)
                folder.rows = 0
                _fsync_dir(folder.path)
            room = self.part_rows - folder.rows
            chunk, lines = lines[:room], lines[room:]
            folder.handle.write("".join(chunk).encode())
            folder.rows += len(chunk)
            folder.touched = True

    def _sync(self, folder: _Hour) -> None:
        if folder.handle is not None and folder.touched:
            folder.handle.flush()
            os.fsync(folder.handle.fileno())
            folder.touched = False

    def write(self, msgs: list) -> None:
        """Write the lines of these messages and fsync them (then they may be acknowledged)."""
        by_hour: dict[int, list[str]] = {}
        for msg in msgs:
            arrival = stored_ms(msg) + self.offset_ms
            hour = arrival - arrival % HOUR_MS
            self.latest_arrival = max(self.latest_arrival, arrival)
            received = iso_ms(arrival / 1000)
            try:
                lines = contract_lines(decode(msg.data), received)
            except WireError as exc:
                lines = [as_it_came(msg.data, str(exc), received, msg.subject)]
            by_hour.setdefault(hour, []).extend(lines)
        for hour, lines in by_hour.items():
            folder = self._hour(hour)
            if folder is None:
                self.stats.skipped_sealed += len(lines)
                continue
            self._append(folder, lines)
            self.stats.lines += len(lines)
        for folder in self.hours.values():
            self._sync(folder)
        self.stats.messages += len(msgs)

    # -- sealing -------------------------------------------------------------------------------
    def seal(self, nothing_pending: bool, now_ms: int | None = None) -> list[str]:
        """Seal every hour known complete (see the module docstring); returns their batch ids.

        Call only when no message is waiting for an acknowledgement.
        """
        now = (now_ms if now_ms is not None else int(self.clock() * 1000)) + self.offset_ms
        complete_before = self.latest_arrival
        if nothing_pending:
            complete_before = max(complete_before, now - GRACE_MS)
        if self.first_hour is None:
            return []
        done = []
        # from the oldest hour not known sealed: an hour older than the landing's folders can
        # appear when the stream holds older messages; the gaps it opens are sealed empty
        hour = min([*self.hours, self.first_hour if self.next_to_seal is None else self.next_to_seal])
        while hour + HOUR_MS <= complete_before:
            if hour not in self.sealed:
                self._seal(hour)
                done.append(batch_id(hour))
            hour += HOUR_MS
        self.next_to_seal = hour
        self.stats.sealed.extend(done)
        return done

    def _seal(self, hour: int) -> None:
        folder = self.hours.pop(hour, None)
        path = self.root / f"arrived={batch_id(hour)}"
        if folder is not None and folder.handle is not None:
            self._sync(folder)
            folder.handle.close()
        path.mkdir(parents=True, exist_ok=True)
        files = []
        for part in sorted(path.glob("part-*.jsonl")):
            data = part.read_bytes()
            files.append(
                {"name": part.name, "rows": data.count(b"\n"), "sha256": hashlib.sha256(data).hexdigest()}
            )
        manifest = {"source": "units", "batch": batch_id(hour), "files": files}
        tmp = self.root / f".{path.name}.{MARKER}.tmp"
        with open(tmp, "w") as fh:
            fh.write(json.dumps(manifest, indent=1) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path / MARKER)
        _fsync_dir(path)
        _fsync_dir(self.root)
        self.sealed.add(hour)

    def open_hours(self) -> list[str]:
        return [batch_id(h) for h in sorted(self.hours)]

    # -- the loop ------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event, idle_exit: float | None = None, log=None) -> ArchiveStats:
        """Archive until `stop` (or, with idle_exit, until nothing arrived for that long and every
        hour written is sealed)."""
        self.recover()
        nc = await connect(self.settings, "dayclose-archive")
        try:
            js = nc.jetstream()
            stream = self.settings.telemetry_stream
            action = await retrying(lambda: align(js, stream, CONSUMER, self.settings.stored_filter(), None))
            if log:
                log(f"archive: consumer {action}; {len(self.hours)} unsealed hours taken over")
            sub = await js.pull_subscribe_bind(durable=CONSUMER, stream=stream)
            continuity = Continuity()
            idle_since = time.monotonic()
            while not stop.is_set():
                try:
                    msgs = await sub.fetch(FETCH, timeout=0.5)
                except Exception as exc:  # nothing new, or no consumer leader for a moment
                    if not transient(exc):
                        raise
                    msgs = []
                cut = continuity.first_break(msgs)
                broken = cut is not None
                if broken:
                    msgs = msgs[:cut]
                if msgs:
                    skipped = self.stats.skipped_sealed
                    await asyncio.to_thread(self.write, msgs)
                    await ack_all(msgs[:-1])
                    if broken:  # confirmed, so that the reset below starts after these messages
                        await retrying(partial(msgs[-1].ack_sync, 2.0))
                    else:
                        await ack_all(msgs[-1:])
                    idle_since = time.monotonic()
                    if self.stats.skipped_sealed > skipped and log:  # only after a server clock step
                        extra = self.stats.skipped_sealed - skipped
                        log(f"archive: {extra} lines of already sealed hours skipped")
                if broken:  # the lost messages come back at once (some of the others twice)
                    await sub.unsubscribe()
                    await retrying(lambda: align(js, stream, CONSUMER, self.settings.stored_filter(), None))
                    sub = await js.pull_subscribe_bind(durable=CONSUMER, stream=stream)
                    continuity.reset()
                    self.stats.realigned += 1
                    if log:
                        log("archive: a delivery was lost with a node; consumer reset to its ack floor")
                    continue
                info = await retrying(lambda: js.consumer_info(stream, CONSUMER))
                if not info.num_ack_pending:
                    sealed = self.seal(nothing_pending=not info.num_pending)
                    if sealed and log:
                        log(f"archive: sealed {', '.join(sealed)}")
                if idle_exit and time.monotonic() - idle_since > idle_exit and not self.hours:
                    break
            return self.stats
        finally:
            for folder in self.hours.values():
                if folder.handle is not None:
                    self._sync(folder)
                    folder.handle.close()
                    folder.handle = None
            await nc.close()


def _utc_hour_ms(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H")) * 1000


def _next_part(parts: list[Path]) -> int:
    numbers = [int(p.stem.split("-")[1]) for p in parts if p.stem.split("-")[1].isdigit()]
    return max(numbers, default=-1) + 1


def _truncate_partial_line(part: Path) -> None:
    """Cut a last line that a kill left without its newline (its message was never acknowledged)."""
    data = part.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(part, "r+b") as fh:
            fh.truncate(data.rfind(b"\n") + 1)
            fh.flush()
            os.fsync(fh.fileno())
