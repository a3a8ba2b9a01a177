"""`dayclose monitor`: line monitors on durable pull consumers, one worker per set of partitions.

A worker owns partitions k with k % workers == worker. For each partition it runs two units,
live and backfill, each a durable pull consumer (explicit acks) and a PartitionProcessor:

    fetch -> score (partition.py) -> publish alerts and dead letters, await their acks
          -> checkpoint the processor to the KV bucket -> acknowledge the messages

so a crash at any point repeats at most the work after the last checkpoint, with the same
results (the same alert ids: the alerts stream's duplicate window and the table's key keep
one). The backfill unit fetches small batches, so a plant's replay shares the worker with
the live subjects instead of queueing in front of them. Worker 0 also runs the dead-letter
rate watcher (dlrate.py) and the alerts sink that writes `line_alerts` (alerts.py).

On a cluster that loses a node a worker rides it out without restarting: its connection
moves to another node, JetStream calls that fail while a leader is elected are retried, alerts
and dead letters are re-sent until stored (failover.py), and a delivery lost in flight makes
the unit bring its consumer in line with its checkpoint again (consumers.Continuity). Alerts do
not wait for any of it: each live unit also scores the gateways' core NATS copies as they come
(live.py), whichever path brings a reading first, once.

`--workers N` starts N worker processes on this machine; `--worker I --of N` runs one (to
spread workers over machines). Stop with SIGTERM or Ctrl-C: a worker finishes its batch,
checkpoints and acknowledges before it exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from array import array
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from nats.js.errors import NotFoundError

from dayclose.errors import DaycloseError
from dayclose.settings import resolve_target
from dayclose.stream.alerts import AlertTable, alert_line
from dayclose.stream.config import LANES, StreamSettings
from dayclose.stream.consumers import Continuity, Puller, ack_all, align, position
from dayclose.stream.detectors import Reference, Thresholds
from dayclose.stream.dlrate import DeadLetterRate
from dayclose.stream.failover import Publisher, retrying, transient
from dayclose.stream.live import LiveFeed, LiveListeners
from dayclose.stream.partition import DeadLetter, Outputs, PartitionProcessor, warm_up
from dayclose.stream.streams import connect

CHECKPOINT_EVERY_S = 1.0  # checkpoint (then ack) at most this often under load, and whenever idle
FETCH_LIVE = 256
FETCH_BACKFILL = 32
FETCH_WAIT_S = 0.5


@dataclass
class Stats:
    """What a worker did, for `--stats` (the benchmark), the demo and the final log line."""

    messages: int = 0
    readings: int = 0
    alerts: int = 0
    dead_letters: int = 0
    latency_at: array = field(default_factory=lambda: array("d"))  # wall clock of each live message scored
    latency_ms: array = field(default_factory=lambda: array("f"))  # its published -> scored (paged) latency
    backfill_readings: int = 0
    live_readings: int = 0  # of `readings`, scored first from the live path (live.py)
    live_nodes: list[str | None] = field(default_factory=list)  # where the live path listens now
    live_moves: int = 0  # a live listener moved off the node the other was on
    realigned: int = 0  # consumers brought in line again after a delivery lost in flight (a node lost)
    backfill_span: list[float] = field(default_factory=list)  # wall clock of the first and last backfill
    busy_cpu: list[float] = field(
        default_factory=list
    )  # process CPU time before the first message, after the last

    def live_p99(self, since: float | None = None, until: float | None = None) -> float | None:
        lat = sorted(
            ms
            for t, ms in zip(self.latency_at, self.latency_ms, strict=True)
            if (since is None or t >= since) and (until is None or t <= until)
        )
        return lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None

    def to_dict(self, cpu_s: float, wall_s: float) -> dict:
        lat = sorted(self.latency_ms)

        def pct(q: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(q * len(lat)))], 3) if lat else None

        span = self.backfill_span
        return {
            "messages": self.messages,
            "readings": self.readings,
            "alerts": self.alerts,
            "dead_letters": self.dead_letters,
            "realigned": self.realigned,
            "live_readings": self.live_readings,
            "cpu_s": round(cpu_s, 3),
            "wall_s": round(wall_s, 3),
            "busy_cpu_s": round(self.busy_cpu[1] - self.busy_cpu[0], 3) if len(self.busy_cpu) == 2 else None,
            "latency_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": lat[-1] if lat else None, "n": len(lat)},
            "backfill": {
                "readings": self.backfill_readings,
                "first_at": span[0] if span else None,
                "last_at": span[1] if len(span) == 2 else None,
                "seconds": round(span[1] - span[0], 3) if len(span) == 2 else None,
                "live_p99_ms_meanwhile": self.live_p99(*span) if len(span) == 2 else None,
            },
        }


class Unit:
    """One durable consumer and the processor whose checkpoint says where it is."""

    def __init__(self, settings: StreamSettings, name: str, stream: str, subject: str, processor, batch: int):
        self.settings = settings
        self.name = name
        self.stream = stream
        self.subject = subject
        self.processor = processor
        self.batch = batch
        self.key = name
        self.sub = None
        self.last_message = time.monotonic()
        self.continuity = Continuity()
        self.feed: LiveFeed | None = None  # the live path of a live unit (run_worker sets it)
        self.partition: int | None = None

    async def open(self, nc, js, kv, from_new: bool = False) -> str:
        """Restore the checkpoint and align the consumer with it. Without a checkpoint the unit
        starts at the stream's beginning, or with from_new after its last message (a checkpoint
        saying so is written first, so a crash cannot send it back to the beginning)."""
        with contextlib.suppress(NotFoundError):
            entry = await retrying(lambda: kv.get(self.key))
            if entry.value:
                self.processor.restore(entry.value)
        if from_new and not self.processor.last_seq:
            self.processor.last_seq = (await retrying(lambda: js.stream_info(self.stream))).state.last_seq
            await retrying(lambda: kv.put(self.key, self.processor.snapshot()))
        action = await retrying(
            lambda: align(js, self.stream, self.name, self.subject, self.processor.last_seq)
        )
        self.sub = await Puller(nc, self.stream, self.name).start()
        self.continuity.reset()
        return action

    async def realign(self, nc, js) -> None:
        """A delivery was lost in flight (a node died holding it): deliver again from the message
        after the checkpoint's, before anything newer is scored."""
        await self.sub.stop()
        await retrying(lambda: align(js, self.stream, self.name, self.subject, self.processor.last_seq))
        self.sub = await Puller(nc, self.stream, self.name).start()
        self.continuity.reset()

    async def run(self, nc, js, kv, stop: asyncio.Event, stats: Stats, live: bool, page=None) -> None:
        unacked: list = []
        checkpointed = time.monotonic()
        live_scored = False  # the live path scored since the last checkpoint
        while True:
            stopping = stop.is_set()
            msgs = []
            broken = False
            if not stopping:
                try:
                    msgs = await self.sub.fetch(self.batch, timeout=FETCH_WAIT_S)
                except TimeoutError:
                    msgs = []
                cut = self.continuity.first_break(msgs)
                if cut is not None:  # what follows a lost delivery waits: the order of scoring holds
                    msgs, broken = msgs[:cut], True
            if msgs and not stats.busy_cpu:
                stats.busy_cpu.append(time.process_time())
            positions = [position(m) for m in msgs]
            outs = [self._process(m, seq, stored) for m, (seq, stored) in zip(msgs, positions, strict=True)]
            tick = getattr(self.processor, "tick", None)
            if tick is not None:
                outs.append(tick())
            if msgs:
                self.last_message = time.monotonic()
                stats.messages += len(msgs)
                scored = sum(o.scored for o in outs)
                stats.readings += scored
                now = time.time()
                if live:  # what the live path had scored first is no latency here
                    first = [o.published_ms for o in outs if o.scored and o.published_ms is not None]
                    stats.latency_ms.extend(now * 1000 - ms for ms in first)
                    stats.latency_at.extend([now] * len(first))
                elif self.stream == self.settings.telemetry_stream:
                    stats.backfill_readings += scored
                    stats.backfill_span[:] = [stats.backfill_span[0] if stats.backfill_span else now, now]
            if self.feed is not None:
                self.feed.drain()  # live messages that waited for what the stored path just brought
                if self.feed.outbox:
                    self.last_message = time.monotonic()
                    live_scored = True
            unacked.extend(msgs)
            due = (unacked or live_scored) and (
                not msgs or stopping or broken or time.monotonic() - checkpointed >= CHECKPOINT_EVERY_S
            )
            # the snapshot is taken before the live path's outputs so far are stored, and written
            # after: a checkpoint never holds a scoring whose alerts might not be stored
            snapshot = self.processor.snapshot() if due else None
            if self.feed is not None:
                outs.extend(self.feed.take())
            await publish_outputs(js, self.settings, outs, stats, page)
            if snapshot is not None:
                await retrying(partial(kv.put, self.key, snapshot))
                live_scored = False
                await ack_all(unacked)
                unacked.clear()
                checkpointed = time.monotonic()
                stats.busy_cpu[1:] = [time.process_time()]
            if stopping:
                return
            if broken:
                await self.realign(nc, js)
                stats.realigned += 1
            if not live:
                await asyncio.sleep(0)  # let the live units in between backfill batches

    def _process(self, msg, seq: int, stored: int) -> Outputs:
        try:
            return self.processor.process(msg.subject, msg.data, seq, stored)
        except Exception as exc:  # a bug must not stop the partition: dead-letter and go on
            self.processor.last_seq = max(self.processor.last_seq, seq)
            parts = msg.subject.split(".")
            plant, line = (parts[-2], parts[-1]) if len(parts) >= 2 else ("-", "-")
            reason = f"monitor error: {type(exc).__name__}: {exc}"
            return Outputs(dead=[DeadLetter(plant, line, reason, msg.data, f"{seq}/all", msg.subject, seq)])


async def publish_outputs(js, settings: StreamSettings, outs: list[Outputs], stats: Stats, page=None) -> None:
    """Alerts and dead letters of a batch, stored before the batch is checkpointed (re-sent until
    they are: their ids make a copy harmless); each paged alert that opens is also one line for
    `page` (the operator's terminal)."""
    publisher = Publisher(js)
    for out in outs:
        for alert in out.alerts:
            if page is not None and alert["paged"] and alert["event"] == "open" and not out.paged:
                page(alert_line(alert))
            subject = settings.alert_subject(not alert["paged"], alert["plant_id"], alert["line_id"])
            headers = {"Nats-Msg-Id": f"{alert['alert_id']}/{alert['event']}"}
            await publisher.publish(subject, json.dumps(alert).encode(), headers)
            stats.alerts += 1
        for dead in out.dead:
            headers = {
                "Nats-Msg-Id": f"dl/{dead.msg_id}",
                "Dayclose-Reason": dead.reason[:500].replace("\r", " ").replace("\n", " "),
                "Dayclose-Source-Subject": dead.source_subject,
                "Dayclose-Source-Seq": str(dead.source_seq),
            }
            subject = settings.dead_subject(dead.plant_id, dead.line_id)
            await publisher.publish(subject, dead.payload, headers)
            stats.dead_letters += 1
    # stored at last, or after failover.RETRY_FOR_S a TimeoutError: the worker stops, and resumes
    # from its checkpoint
    await publisher.settle()


async def sink_alerts(js, settings: StreamSettings, target_name: str | None, stop: asyncio.Event) -> None:
    """Copy the alerts stream into line_alerts (one writer), acknowledging after each commit."""
    table = AlertTable(resolve_target(target_name))
    name = "alerts-sink"
    await retrying(lambda: align(js, settings.alerts_stream, name, f"{settings.prefix}.alerts.>", None))
    sub = await js.pull_subscribe_bind(durable=name, stream=settings.alerts_stream)
    while not stop.is_set():
        try:
            msgs = await sub.fetch(256, timeout=FETCH_WAIT_S)
        except Exception as exc:  # nothing new, or no consumer leader for a moment
            if not transient(exc):
                raise
            continue
        await asyncio.to_thread(table.upsert, [json.loads(m.data) for m in msgs])
        await ack_all(msgs)


def partitions_of(worker: int, workers: int, partitions: int) -> list[int]:
    if not 0 <= worker < workers:
        raise DaycloseError(f"--worker {worker} --of {workers}: expected 0 <= worker < workers")
    return [k for k in range(partitions) if k % workers == worker]


def units_for(
    settings: StreamSettings, worker: int, workers: int, reference: Reference
) -> list[tuple[Unit, bool]]:
    """The units a worker runs, each with whether it is a live one (latency is measured there)."""
    th = Thresholds()
    units = []
    for k in partitions_of(worker, workers, settings.partitions):
        for lane in LANES:
            unit = Unit(
                settings,
                f"monitor-{lane}-{k:03d}",
                settings.telemetry_stream,
                settings.stored_filter(lane, k),
                PartitionProcessor(settings, reference, th),
                FETCH_LIVE if lane == "live" else FETCH_BACKFILL,
            )
            unit.partition = k
            units.append((unit, lane == "live"))
    if worker == 0:
        rate = DeadLetterRate(settings)
        units.append(
            (
                Unit(
                    settings,
                    "monitor-dead-letter-rate",
                    settings.dead_stream,
                    f"{settings.prefix}.dead.>",
                    rate,
                    256,
                ),
                False,
            )
        )
    return units


async def run_worker(
    settings: StreamSettings,
    worker: int = 0,
    workers: int = 1,
    target_name: str | None = None,
    stop: asyncio.Event | None = None,
    sink: bool = True,
    idle_exit: float | None = None,
    log=None,
    stats: Stats | None = None,
    from_new: bool = False,
    live_path: bool = True,
) -> Stats:
    """One monitor worker until `stop` is set (or nothing arrived for `idle_exit` seconds);
    `stats` (filled as it goes) lets a caller watch it. Without live_path, it scores only what
    JetStream delivers (the design before live.py: the benchmark compares the two)."""
    stop = stop or asyncio.Event()
    reference = Reference.from_seeds()
    warm_up()
    nc = await connect(settings, f"dayclose-monitor-{worker}")
    stats = stats if stats is not None else Stats()
    listeners = None
    try:
        js = nc.jetstream()
        try:
            kv = await retrying(lambda: js.key_value(settings.state_bucket))
        except NotFoundError:
            raise DaycloseError(
                f"no KV bucket {settings.state_bucket} at {settings.url}: run `dayclose stream setup` first"
            ) from None
        units = units_for(settings, worker, workers, reference)
        actions = [await unit.open(nc, js, kv, from_new) for unit, _ in units]
        if log:
            parts = ", ".join(f"{a} {actions.count(a)}" for a in sorted(set(actions)))
            log(f"worker {worker}/{workers}: {len(units)} consumers ({parts})")
        feeds = {}
        for unit, live in units:
            if live and live_path:
                unit.feed = feeds[unit.partition] = LiveFeed(unit.processor, stats, log)
        if feeds:
            listeners = await LiveListeners(settings, feeds, f"dayclose-monitor-{worker}", stats).start()
        tasks = [asyncio.create_task(unit.run(nc, js, kv, stop, stats, live, log)) for unit, live in units]
        if worker == 0 and sink:
            tasks.append(asyncio.create_task(sink_alerts(js, settings, target_name, stop)))
        if idle_exit:
            tasks.append(asyncio.create_task(_stop_when_idle([u for u, _ in units], idle_exit, stop)))
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.exception() is not None:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise task.exception()
        return stats
    finally:
        if listeners is not None:
            await listeners.stop()
        await nc.close()


async def _stop_when_idle(units: list[Unit], idle: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await asyncio.sleep(0.2)
        if time.monotonic() - max(u.last_message for u in units) > idle:
            stop.set()


def monitor_main(
    settings: StreamSettings,
    worker: int,
    workers: int,
    target_name: str | None,
    idle_exit: float | None = None,
    stats_path: Path | None = None,
    log=print,
    from_new: bool = False,
    live_path: bool = True,
) -> int:
    """Run one worker in this process until SIGTERM/SIGINT; write its stats if asked."""

    async def main() -> Stats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        parent = os.getppid()

        async def orphaned() -> None:  # a worker started by `--workers N` ends with its parent
            while not stop.is_set():
                await asyncio.sleep(1)
                if os.getppid() != parent:
                    stop.set()

        watcher = asyncio.create_task(orphaned())
        try:
            return await run_worker(
                settings,
                worker,
                workers,
                target_name,
                stop,
                idle_exit=idle_exit,
                log=log,
                from_new=from_new,
                live_path=live_path,
            )
        finally:
            watcher.cancel()

    cpu, wall = time.process_time(), time.monotonic()
    stats = asyncio.run(main())
    summary = stats.to_dict(time.process_time() - cpu, time.monotonic() - wall)
    if stats_path:
        stats_path.write_text(json.dumps(summary, indent=1) + "\n")
    log(
        f"worker {worker}/{workers}: {summary['readings']:,} readings scored in "
        f"{summary['messages']:,} messages, {summary['alerts']} alerts, "
        f"{summary['dead_letters']} dead letters"
    )
    return 0


def supervise(workers: int, argv: list[str], log=print) -> int:
    """Start `workers` worker processes (`dayclose monitor --worker I --of N ...`); restart any that
    dies unexpectedly; on SIGTERM/SIGINT stop them all and wait."""
    stopping = False

    def start(i: int) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "dayclose.cli", "monitor", "--worker", str(i), "--of", str(workers), *argv]
        )

    def stop(_sig, _frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    children = {i: start(i) for i in range(workers)}
    while not stopping:
        time.sleep(0.5)
        for i, child in list(children.items()):
            if child.poll() is not None and not stopping:
                if child.returncode == 0:
                    del children[i]  # it stopped on its own (--idle-exit)
                    continue
                log(f"worker {i} exited with {child.returncode}; restarting it")
                children[i] = start(i)
        if not children:
            return 0
    for child in children.values():
        child.send_signal(signal.SIGTERM)
    return max((child.wait() for child in children.values()), default=0)
