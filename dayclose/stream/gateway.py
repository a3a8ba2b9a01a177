"""`dayclose simulate plants`: plant gateways publishing unit readings to JetStream.

Every line of the first N plants (seeds/lines.csv) fills one SKU and finishes units at the
same cadence (rate / lines a second; unit i at nominal t0 + i x period, plus jitter under
half a period). A gateway batches a line's readings like a real one: a message is sent when
it holds 100 readings or its 200 ms window is over, whichever comes first, on the line's
live subject (`<prefix>.in.live.<plant>.<line>`), with Nats-Msg-Id = line:first plc_seq:count,
so a retried publish is stored once. Readings are drawn per message from a generator seeded
by (seed, line, first unit), so a run is deterministic for a seed whatever the timing.

Injected, deterministically for the seed (times as shares of the duration D):
- drift: one line's mean fill level creeps from target (0.15 D) to its SKU's upper limit
  (0.55 D) and beyond, until it is fixed (0.80 D); the checkweigher rejects out-of-spec units;
- stuck: one line's temperature sensor repeats one value from 0.25 D to 0.50 D;
- spikes: three single readings with out-of-range values (fill 9999.9, torque -999.0), and
  `extra_spikes` more spread evenly over the run (alerts all along: cluster tests, benchmark);
- garbage beside real units: copies of readings with a NaN sensor, copies stamped 26 h in
  the future, payloads of random bytes, and a burst of 50 NaN copies on one line (a failing
  sensor: the dead-letter rate alert);
- retries: five messages published twice with the same Nats-Msg-Id;
- an outage: the last plant has been offline for `backlog_hours` when the run starts and
  reconnects at `reconnect_after` (0.3 D): its gateway replays the buffered readings, with
  their original event times and an out-of-spec episode in the middle, on the backfill
  subject (`<prefix>.in.backfill...`) as fast as it can, while its lines go on live.

The ground truth is written to <out>/truth/: good units per production day and SKU of the
real units (garbage copies are not units), the readings published per line and lane, and
the injections (which line drifted when; its first out-of-spec reading).
"""

from __future__ import annotations

import asyncio
import csv
import heapq
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np

from dayclose.errors import DaycloseError
from dayclose.generate.units import PLC_DAY, PLC_EPOCH, read_reference
from dayclose.generate.writer import iso_ms, write_csv
from dayclose.stream.config import LIVE_LANE, StreamSettings
from dayclose.stream.detectors import Reference
from dayclose.stream.failover import Publisher
from dayclose.stream.live import LiveSender
from dayclose.stream.streams import connect
from dayclose.stream.wire import encode

WINDOW_MS = 200
MAX_BATCH = 100
GOOD_SHARE = 0.98
NOISE_SHARE = 1 / 12  # in-control noise sigma = spec width / 12 (Cp 2)
DAY_MS = 86_400_000
MAX_PENDING = 2_000  # publishes in flight before waiting for their acknowledgements


@dataclass(frozen=True)
class LinePlan:
    index: int
    line_id: str
    plant_id: str
    sku: str
    lo: np.ndarray
    hi: np.ndarray

    @property
    def target(self) -> float:
        return float(self.lo[0] + self.hi[0]) / 2

    @property
    def mid(self) -> np.ndarray:
        return (self.lo + self.hi) / 2


@dataclass
class Scenario:
    """What the plants do, fixed by the seed and the run's start (plant clock, ms)."""

    seed: int
    rate: float
    duration_s: float
    backlog_s: float
    start_ms: int
    fmt: str
    lines: list[LinePlan]
    drift_line: LinePlan
    stuck_line: LinePlan
    burst_line: LinePlan
    offline_plant: str
    spikes: list[tuple[LinePlan, float, int]]  # line, at (share of D), sensor
    copies: list[tuple[str, LinePlan, float]]  # nan | future | undecodable, line, at
    burst_at: float = 0.6
    reconnect_share: float = 0.3

    @property
    def period_ms(self) -> float:
        return 1000.0 * len(self.lines) / self.rate

    @property
    def t0(self) -> int:
        """Nominal time of unit 0 of every line: the start of the outage."""
        return self.start_ms - int(self.backlog_s * 1000)

    @property
    def end_ms(self) -> int:
        return self.start_ms + int(self.duration_s * 1000)

    def at(self, share: float) -> int:
        return self.start_ms + int(share * self.duration_s * 1000)

    @property
    def reconnect_ms(self) -> int:
        return self.at(self.reconnect_share)

    @property
    def seq_base(self) -> int:
        """plc_seq of unit 0: the generator's convention, days since 2020-01-01 x 10 M."""
        return (self.t0 // DAY_MS - (PLC_EPOCH - date(1970, 1, 1)).days) * PLC_DAY


def build_scenario(
    plants: int,
    rate: float,
    duration_s: float,
    seed: int = 0,
    fmt: str = "binary",
    backlog_hours: float = 4.0,
    reconnect_after_s: float | None = None,
    start_ms: int | None = None,
    clock_offset_s: float = 0.0,
    extra_spikes: int = 0,
) -> Scenario:
    """The scenario of a run that starts now on the plants' clock (machine clock + offset), or
    at start_ms on it."""
    if plants < 2:
        raise DaycloseError(f"--plants {plants}: expected at least 2 (one of them goes offline)")
    if rate <= 0 or duration_s <= 0 or backlog_hours < 0:
        raise DaycloseError("--rate and --duration must be positive, --backlog-hours 0 or more")
    refs, by_container = read_reference(plants)
    specs = Reference.from_seeds().specs
    if len({r.plant_id for r in refs}) < plants:
        raise DaycloseError(f"--plants {plants}: seeds/plants has only {len({r.plant_id for r in refs})}")
    rng = np.random.default_rng([seed, 1])
    lines = []
    for i, ref in enumerate(refs):
        choices = by_container["bottle" if ref.kind == "bottling" else "can"]
        sku = choices[int(rng.integers(len(choices)))].sku
        lines.append(LinePlan(i, ref.line_id, ref.plant_id, sku, specs[sku].lo, specs[sku].hi))
    offline = lines[-1].plant_id
    online = [ln for ln in lines if ln.plant_id != offline]
    order = [online[int(k)] for k in rng.permutation(len(online))]
    pick = lambda k: order[k % len(order)]  # noqa: E731 (few lines: injections may share one)
    spikes = [(pick(3 + k), share, k % 2) for k, share in enumerate((0.35, 0.45, 0.6))]
    spikes += [(pick(11 + k), (k + 0.5) / extra_spikes, k % 2) for k in range(extra_spikes)]
    copies = [
        ("nan", pick(4), 0.2),
        ("nan", pick(5), 0.4),
        ("nan", pick(6), 0.7),
        ("future", pick(7), 0.3),
        ("future", pick(8), 0.65),
        ("undecodable", pick(9), 0.5),
        ("undecodable", pick(10), 0.75),
    ]
    now_ms = int((time.time() + clock_offset_s) * 1000)
    reconnect_share = 0.3 if reconnect_after_s is None else reconnect_after_s / duration_s
    if not 0 <= reconnect_share <= 1:
        raise DaycloseError(f"--reconnect-after {reconnect_after_s}: expected within the --duration")
    return Scenario(
        seed=seed,
        rate=rate,
        duration_s=duration_s,
        backlog_s=backlog_hours * 3600,
        start_ms=start_ms if start_ms is not None else now_ms,
        fmt=fmt,
        lines=lines,
        drift_line=pick(0),
        stuck_line=pick(1),
        burst_line=pick(2),
        offline_plant=offline,
        spikes=spikes,
        copies=copies,
        reconnect_share=reconnect_share,
    )


@dataclass
class Chunk:
    """One message's worth of one line: units [i0, i1)."""

    line: LinePlan
    i0: int
    i1: int
    due_ms: int  # when the gateway sends it (plant clock)


@dataclass
class Truth:
    good: dict[tuple[str, str], int] = field(default_factory=dict)  # (day, sku) -> good units
    lines: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (line, lane) -> [n, first, last]
    injections: list[dict] = field(default_factory=list)
    messages: int = 0
    readings: int = 0
    duplicates_acked: int = 0
    garbage_messages: int = 0
    resent: int = 0  # publishes sent again after a refusal or no acknowledgement (a node lost)
    live_copies: int = 0  # core NATS copies of live messages (live.py)
    live_resent: int = 0  # copies sent again after the connection moved to another node


class Plants:
    """The gateways of a scenario: generation of readings and the publishing loop."""

    def __init__(
        self, settings: StreamSettings, scenario: Scenario, log: Callable[[str], None] | None = None
    ):
        self.settings = settings
        self.sc = scenario
        self.log = log or (lambda _m: None)
        self.truth = Truth()
        self.first_out_of_spec: dict | None = None
        self.offset_ms = int(settings.clock_offset_s * 1000)
        self.publisher: Publisher | None = None
        self.live: LiveSender | None = None  # the core NATS copies of live messages
        self._queue: asyncio.Queue = asyncio.Queue()  # JetStream publishes, for _publish_queued
        self._js_task: asyncio.Task | None = None
        self.nc = None  # the gateways' connection while they run (which node it is on: cluster tests)
        self._done_injections: set[int] = set()
        self._garbage = [*scenario.copies, ("burst", scenario.burst_line, scenario.burst_at)]
        self._retries = [scenario.at(share) for share in (0.1, 0.3, 0.5, 0.7, 0.9)]
        if abs(scenario.start_ms - self.now_ms()) > 60_000:
            raise DaycloseError(
                f"the scenario starts at {iso_ms(scenario.start_ms / 1000)} but the plants' clock reads "
                f"{iso_ms(self.now_ms() / 1000)}: build it with the same clock offset"
            )

    # -- time and chunks ------------------------------------------------------------------
    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.offset_ms

    def window_units(self, w: int) -> tuple[int, int]:
        p = self.sc.period_ms
        return math.ceil(w * WINDOW_MS / p), math.ceil((w + 1) * WINDOW_MS / p)

    def chunks_of_window(self, line: LinePlan, w: int) -> list[Chunk]:
        a, b = self.window_units(w)
        out = []
        p = self.sc.period_ms
        for i0 in range(a, b, MAX_BATCH):
            i1 = min(b, i0 + MAX_BATCH)
            last_bound = self.sc.t0 + (i1 - 1) * p + 0.5 * p  # the last unit is done by then
            due = last_bound if i1 - i0 == MAX_BATCH else max(last_bound, self.sc.t0 + (w + 1) * WINDOW_MS)
            out.append(Chunk(line, i0, i1, int(math.ceil(due))))
        return out

    def window_of(self, t_ms: int) -> int:
        return max(0, (t_ms - self.sc.t0) // WINDOW_MS)

    # -- readings ---------------------------------------------------------------------------
    def readings(self, chunk: Chunk) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(plc_seq, event_ms, verdict, sensors (3, n)) of a chunk, deterministic for the seed."""
        sc, line = self.sc, chunk.line
        n = chunk.i1 - chunk.i0
        rng = np.random.default_rng([sc.seed, line.index, chunk.i0])
        i = np.arange(chunk.i0, chunk.i1)
        event = (sc.t0 + (i + 0.5 * rng.random(n)) * sc.period_ms).astype(np.int64)
        width = line.hi - line.lo
        sensors = line.mid[:, None] + rng.normal(0.0, 1.0, (3, n)) * (width * NOISE_SHARE)[:, None]
        if line is sc.drift_line:
            a, b, c = sc.at(0.15), sc.at(0.55), sc.at(0.8)
            ramp = np.clip((event - a) / (b - a), 0, None) * (line.hi[0] - line.target)
            sensors[0] += np.where((event >= a) & (event < c), ramp, 0.0)
        if line.plant_id == sc.offline_plant and line.index % 2 == 0:  # the backlog's episode
            mid_outage = sc.t0 + int(sc.backlog_s * 500)
            bump = (event >= mid_outage) & (event < mid_outage + 40 * sc.period_ms)
            sensors[0] += np.where(bump, 1.2 * (line.hi[0] - line.target), 0.0)
        if line is sc.stuck_line:
            stuck = (event >= sc.at(0.25)) & (event < sc.at(0.5))
            sensors[2] = np.where(stuck, round(float(line.mid[2]) + 0.137, 3), sensors[2])
        sensors = sensors.astype(np.float32).astype(np.float64)  # what a float32 sensor reports
        for spike_line, share, sensor in sc.spikes:
            unit = math.ceil((sc.at(share) - sc.t0) / sc.period_ms)
            if spike_line is line and chunk.i0 <= unit < chunk.i1:
                sensors[sensor, unit - chunk.i0] = 9999.9 if sensor == 0 else -999.0
        verdict = (rng.random(n) < GOOD_SHARE).astype(np.uint8)
        verdict[(sensors[0] < line.lo[0]) | ((sensors[0] > line.hi[0]) & (sensors[0] < 9999))] = 0
        return sc.seq_base + i, event, verdict, sensors

    def _count(self, chunk: Chunk, lane: str, seq, event, verdict, sensors) -> None:
        truth, line = self.truth, chunk.line
        days = (event // DAY_MS)[verdict == 1]
        for day, count in zip(*np.unique(days, return_counts=True), strict=True):
            key = (time.strftime("%Y-%m-%d", time.gmtime(int(day) * 86400)), line.sku)
            truth.good[key] = truth.good.get(key, 0) + int(count)
        entry = truth.lines.setdefault((line.line_id, lane), [0, int(seq[0]), int(seq[-1])])
        entry[0] += len(seq)
        entry[1], entry[2] = min(entry[1], int(seq[0])), max(entry[2], int(seq[-1]))
        truth.readings += len(seq)
        if line is self.sc.drift_line and self.first_out_of_spec is None:
            out = np.nonzero(sensors[0] > line.hi[0])[0]
            if len(out):
                k = int(out[0])
                self.first_out_of_spec = {
                    "plc_seq": int(seq[k]),
                    "event_at": iso_ms(int(event[k]) / 1000),
                    "event_ms": int(event[k]),
                    "value": float(sensors[0, k]),
                }

    # -- publishing ------------------------------------------------------------------------
    async def _publish(self, js, subject: str, payload: bytes, msg_id: str, lane: str) -> None:
        """Every message has a Nats-Msg-Id, garbage included: one that has to be sent again (a
        node lost before it acknowledged) is stored once. A live message also goes at once as
        a core NATS copy on the lane `now` (live.py), which nothing holds up; its JetStream
        publish is queued for the publishing task, so that a stream electing its leader (the
        Publisher then holds everything new until what it swallowed is stored) does not stop
        the copies. Backfill waits while MAX_PENDING messages are queued; live never waits."""
        headers = {"Nats-Msg-Id": msg_id}
        if lane == "live":
            if self.live is None:
                self.live = LiveSender(self.nc)
            plant_id, line_id = subject.rsplit(".", 2)[1:]
            copy = self.settings.ingress_subject(LIVE_LANE, plant_id, line_id)
            await self.live.send(copy, payload, headers)
        if self.publisher is None or self.publisher.js is not js:
            # one per connection: the live loop and the replay share it
            self.publisher = Publisher(js, self.nc)
            self._js_task = asyncio.create_task(self._publish_queued(self.publisher))
        self._queue.put_nowait((subject, payload, headers))
        self.truth.messages += 1
        while lane != "live" and self._queue.qsize() >= MAX_PENDING and not self._js_task.done():
            await asyncio.sleep(0.005)

    async def _publish_queued(self, publisher: Publisher) -> None:
        """Publish to JetStream what `_publish` queued, in order; settle every MAX_PENDING."""
        while True:
            subject, payload, headers = await self._queue.get()
            try:
                await publisher.publish(subject, payload, headers)
                if len(publisher) >= MAX_PENDING:
                    await publisher.settle()
            finally:
                self._queue.task_done()

    async def _settle(self) -> None:
        """Return when everything queued is stored (or raise why it could not be)."""
        if self.publisher is not None:
            task = self._js_task
            joined = asyncio.create_task(self._queue.join())
            await asyncio.wait([joined, task], return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                joined.cancel()
                task.result()  # raises what stopped it
            await self.publisher.settle()
            self.truth.duplicates_acked = self.publisher.duplicates
            self.truth.resent = self.publisher.resent
        if self.live is not None:
            self.truth.live_copies = self.live.sent
            self.truth.live_resent = self.live.resent

    async def send(self, js, chunk: Chunk, lane: str) -> None:
        line = chunk.line
        seq, event, verdict, sensors = self.readings(chunk)
        payload = encode(
            self.sc.fmt, line.line_id, line.sku, seq, event, verdict, sensors, sent_ms=self.now_ms()
        )
        subject = self.settings.ingress_subject(lane, line.plant_id, line.line_id)
        msg_id = f"{line.line_id}:{int(seq[0])}:{len(seq)}"
        await self._publish(js, subject, payload, msg_id, lane)
        had_first = self.first_out_of_spec is not None
        self._count(chunk, lane, seq, event, verdict, sensors)
        if not had_first and self.first_out_of_spec is not None:
            self.first_out_of_spec["published_wall_ms"] = int(time.time() * 1000)
        if lane != "live":
            return
        if self._retries and chunk.due_ms >= self._retries[0]:  # an acknowledgement lost: sent again
            self._retries.pop(0)
            await self._publish(js, subject, payload, msg_id, lane)
            self._note("retry", line, chunk, f"message {msg_id} published twice")
        for k, (kind, target, share) in enumerate(self._garbage):
            if k not in self._done_injections and target is line and chunk.due_ms >= self.sc.at(share):
                self._done_injections.add(k)
                bodies = self._garbage_bodies(kind, k, line, seq, event, verdict, sensors)
                for j, body in enumerate(bodies):
                    await self._publish(js, subject, body, f"garbage:{kind}:{k}:{j}", lane)
                self.truth.garbage_messages += len(bodies)
                self._note(kind, line, chunk, f"{len(bodies)} message(s)")

    def _note(self, kind: str, line: LinePlan, chunk: Chunk, detail: str) -> None:
        self.truth.injections.append(
            {
                "kind": kind,
                "line_id": line.line_id,
                "plant_id": line.plant_id,
                "at": iso_ms(chunk.due_ms / 1000),
                "detail": detail,
            }
        )

    def _garbage_bodies(self, kind: str, k: int, line: LinePlan, seq, event, verdict, sensors) -> list[bytes]:
        """Garbage beside real units: random bytes, or copies of real readings that a sensor
        or a clock spoiled (a NaN value, an event time 26 h ahead)."""
        rng = np.random.default_rng([self.sc.seed, 99, k])
        if kind == "undecodable":
            return [rng.bytes(int(rng.integers(8, 200)))]
        picks = [j % len(seq) for j in range(50)] if kind == "burst" else [int(rng.integers(len(seq)))]
        bodies = []
        for j in picks:
            x, t = sensors[:, j : j + 1].copy(), event[j : j + 1].copy()
            if kind == "future":
                t += 26 * 3_600_000
            else:
                x[int(rng.integers(3)), 0] = np.nan
            body = encode(
                self.sc.fmt, line.line_id, line.sku, seq[j : j + 1], t, verdict[j : j + 1], x, sent_ms=0
            )
            bodies.append(body)
        return bodies

    def first_live_unit(self) -> int:
        """The first unit the offline plant sends live after reconnecting; the ones before are its
        backlog (the same cut as the live loop's: chunks due before the reconnection)."""
        w = self.window_of(self.sc.reconnect_ms)
        while True:
            for chunk in self.chunks_of_window(self.sc.lines[0], w):
                if chunk.due_ms >= self.sc.reconnect_ms:
                    return chunk.i0
            w += 1

    async def replay_backlog(self, js) -> tuple[int, float]:
        """The offline plant's buffered readings, sent on the backfill subject at reconnection in
        messages of 100 (the whole backlog is there: no window to wait for)."""
        started = time.monotonic()
        end = self.first_live_unit()
        lines = [ln for ln in self.sc.lines if ln.plant_id == self.sc.offline_plant]
        for i0 in range(0, end, MAX_BATCH):
            for line in lines:
                await self.send(
                    js, Chunk(line, i0, min(end, i0 + MAX_BATCH), self.sc.reconnect_ms), "backfill"
                )
            await asyncio.sleep(0)
        await self._settle()
        return end * len(lines), time.monotonic() - started

    async def run(self) -> Truth:
        sc = self.sc
        nc = self.nc = await connect(self.settings, "dayclose-gateways", buffer_while_reconnecting=False)
        try:
            js = nc.jetstream()
            heap: list[tuple[int, int, int, int]] = []  # (due, line index, window, chunk number)
            first_w = self.window_of(sc.start_ms)
            for line in sc.lines:
                w = first_w if line.plant_id != sc.offline_plant else self.window_of(sc.reconnect_ms)
                self._push(heap, line, w)
            backlog_task = None
            self.log(
                f"simulating {len({ln.plant_id for ln in sc.lines})} plants, {len(sc.lines)} lines, "
                f"{sc.rate:,.0f} readings/s for {sc.duration_s:.0f} s ({sc.fmt}); {sc.offline_plant} offline "
                f"for {sc.backlog_s / 3600:.1f} h, back at +{(sc.reconnect_ms - sc.start_ms) / 1000:.0f} s"
            )
            while heap:
                due, index, w, k = heap[0]
                if due >= sc.end_ms:
                    break
                wait = (due - self.now_ms()) / 1000
                if wait > 0:
                    await asyncio.sleep(wait)
                if backlog_task is None and self.now_ms() >= sc.reconnect_ms:
                    backlog_task = asyncio.create_task(self.replay_backlog(js))
                heapq.heappop(heap)
                line = sc.lines[index]
                chunks = self.chunks_of_window(line, w)
                if k < len(chunks) and chunks[k].due_ms >= (
                    sc.reconnect_ms if line.plant_id == sc.offline_plant else sc.start_ms
                ):
                    await self.send(js, chunks[k], "live")
                if k + 1 < len(chunks):
                    heapq.heappush(heap, (chunks[k + 1].due_ms, line.index, w, k + 1))
                else:
                    self._push(heap, line, w + 1)
            if backlog_task is None:
                backlog_task = asyncio.create_task(self.replay_backlog(js))
            backlog, seconds = await backlog_task
            await self._settle()
            self.truth.injections.append(
                {
                    "kind": "outage",
                    "line_id": "",
                    "plant_id": sc.offline_plant,
                    "at": iso_ms(sc.t0 / 1000),
                    "detail": f"reconnected {iso_ms(sc.reconnect_ms / 1000)}; "
                    f"{backlog} readings replayed on backfill in {seconds:.1f} s",
                }
            )
            return self.truth
        finally:
            if self._js_task is not None:
                self._js_task.cancel()
            await nc.close()

    def _push(self, heap: list, line: LinePlan, w: int) -> None:
        while True:
            chunks = self.chunks_of_window(line, w)
            if chunks:
                heapq.heappush(heap, (chunks[0].due_ms, line.index, w, 0))
                return
            w += 1  # a window without a unit (slow lines)

    # -- the ground truth ----------------------------------------------------------------------
    def write_truth(self, out: Path) -> Path:
        sc, truth = self.sc, self.truth
        folder = out / "truth"
        write_csv(
            folder / "stream_good_units.csv",
            "production_date,sku,good_units",
            (f"{d},{s},{n}" for (d, s), n in sorted(truth.good.items())),
        )
        write_csv(
            folder / "stream_lines.csv",
            "line_id,lane,readings,first_plc_seq,last_plc_seq",
            (f"{ln},{lane},{n},{a},{b}" for (ln, lane), (n, a, b) in sorted(truth.lines.items())),
        )
        drift = {
            "kind": "drift",
            "line_id": sc.drift_line.line_id,
            "plant_id": sc.drift_line.plant_id,
            "at": iso_ms(sc.at(0.15) / 1000),
            "detail": f"mean fill reaches {sc.drift_line.hi[0]} ml at {iso_ms(sc.at(0.55) / 1000)}; "
            f"fixed at {iso_ms(sc.at(0.8) / 1000)}",
        }
        stuck = {
            "kind": "stuck",
            "line_id": sc.stuck_line.line_id,
            "plant_id": sc.stuck_line.plant_id,
            "at": iso_ms(sc.at(0.25) / 1000),
            "detail": f"temperature_c stuck until {iso_ms(sc.at(0.5) / 1000)}",
        }
        spikes = [
            {
                "kind": "spike",
                "line_id": ln.line_id,
                "plant_id": ln.plant_id,
                "at": iso_ms(sc.at(share) / 1000),
                "detail": "fill_level_ml 9999.9" if sensor == 0 else "capper_torque_nm -999.0",
            }
            for ln, share, sensor in sc.spikes
        ]
        with open(folder / "stream_injections.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, ["kind", "line_id", "plant_id", "at", "detail"])
            writer.writeheader()
            writer.writerows([drift, stuck, *spikes, *truth.injections])
        summary = {
            "start": iso_ms(sc.start_ms / 1000),
            "end": iso_ms(sc.end_ms / 1000),
            "clock_offset_s": self.settings.clock_offset_s,
            "seed": sc.seed,
            "rate": sc.rate,
            "format": sc.fmt,
            "lines": len(sc.lines),
            "offline_plant": sc.offline_plant,
            "outage_from": iso_ms(sc.t0 / 1000),
            "reconnect": iso_ms(sc.reconnect_ms / 1000),
            "drift_line": sc.drift_line.line_id,
            "drift_first_out_of_spec": self.first_out_of_spec,
            "stuck_line": sc.stuck_line.line_id,
            "burst_line": sc.burst_line.line_id,
            "messages": truth.messages,
            "readings": truth.readings,
            "garbage_messages": truth.garbage_messages,
            "duplicates_acked": truth.duplicates_acked,
            "resent": truth.resent,
            "live_copies": truth.live_copies,
            "live_resent": truth.live_resent,
        }
        (folder / "stream_run.json").write_text(json.dumps(summary, indent=1) + "\n")
        return folder


async def simulate(settings: StreamSettings, scenario: Scenario, out: Path, log=None) -> Plants:
    plants = Plants(settings, scenario, log)
    await plants.run()
    plants.write_truth(out)
    return plants
