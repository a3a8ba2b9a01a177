"""Benchmark of the operators' streaming path (not a test); figures go to docs/streaming.md.

    .venv/bin/python -m bench.stream            # the figures in docs/streaming.md (about 7 minutes)
    .venv/bin/python -m bench.stream --quick    # a smoke run with smaller volumes
    .venv/bin/python -m bench.stream --parts cluster   # only some parts (names below)

Each part runs against a private nats-server (K = 8 partitions, file storage). Parts 3, 4 and 6
run the live path as deployed (decision 0006): the gateways send each live message with its
Nats-Msg-Id, first as a core NATS copy on the lane `now`, then to JetStream, and the monitor
listens on two connections (parts 3 and 4: the one server under two names), so it receives each
live message three times; `--no-live-path` runs them without (no copies, the monitor scores what
JetStream delivers), for comparison. Parts 2 and 5 drain a stream filled beforehand: no copies.

1. scoring alone, in this process: decode + validation + lanes + detectors of PartitionProcessor
   over pre-encoded messages of 100 readings from 600 lines, binary and JSON lines: readings
   per CPU-second;
2. one monitor worker (`dayclose monitor`, a process of its own) draining a stream filled
   beforehand: readings per CPU-second of that process, NATS client, acks and checkpoints
   included, binary and JSON lines;
3. latency at 50,000 readings/s offered (100 lines, 500 readings/s each, a message per line
   every 200 ms, a spike on 1% of messages so alerts open and close; `--latency-rate` for
   another volume): p99 from the gateway's send of a message to its alert and to its scoring,
   and from the reading's own timestamp; readings per CPU-second of the monitor worker, and the
   CPU of the gateways (this process) and of nats-server;
4. one plant's 4-hour backlog at 5x volume (2 lines x 386 readings/s x 4 h = 11.1 M readings)
   replayed on the backfill subject while 10,000 readings/s stay live: time until all of it is
   scored, the live p99 meanwhile, and the CPU of each process;
5. the archiver draining the stream of part 2 into a landing: readings/s;
6. (cluster) a 3-node cluster with R3 streams loses a node twice (kill -9) while the simulated
   plants publish 20,000 readings/s (a spike every half second, so alerts open all along) to a
   monitor worker and the archiver in this process: first a node the gateways are not
   connected to (the telemetry stream's leader when it is one of those), then theirs, each
   restarted 15 s later. p99 publish -> alert (the gateway's first publish of a message to its
   readings scored and its alerts paged, by whichever path came first: the live path, live.py,
   or JetStream) by phase (before, each loss's failover, degraded and rejoin, after), the Raft
   elections' and the catch-ups' durations, and the landing against the simulator's truth:
   readings lost, readings stored twice. `--no-live-path`: the monitor scores only what
   JetStream delivers (the design before decision 0006), for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import numpy as np
from nats.js.errors import NoKeysError, NotFoundError

from dayclose.stream.archive import Archiver
from dayclose.stream.config import LIVE_LANE, StreamSettings, settings
from dayclose.stream.detectors import Reference
from dayclose.stream.failover import retrying
from dayclose.stream.gateway import Plants, Truth, build_scenario
from dayclose.stream.live import LiveSender
from dayclose.stream.monitor import Stats
from dayclose.stream.partition import PartitionProcessor, progress, warm_up
from dayclose.stream.server import NodeLoss, PrivateCluster, PrivateServer
from dayclose.stream.session import past_night, run_session
from dayclose.stream.streams import connect, setup
from dayclose.stream.wire import encode

RESULTS = Path(__file__).resolve().parent / "results"
PROJECT = Path(__file__).resolve().parent.parent
REF = Reference.from_seeds()
LINES = sorted(REF.plant_of_line)
BATCH = 100


def log(message: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem = next(
        (
            int(line.split()[1]) // 1024
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        0,
    )
    server = subprocess.run(
        [str(PrivateServer(settings()).binary), "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_mib": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
        "nats_server": server,
        "nats_py": version("nats-py"),
        "numpy": version("numpy"),
        "load_average_at_start": os.getloadavg(),
    }


def sku_of(line_id: str) -> str:
    return "PILS-330-BTL" if line_id.endswith("-1") else "PILS-500-CAN"


def make_messages(
    lines: list[str],
    per_line: int,
    fmt: str,
    seed: int = 0,
    t0_ms: int | None = None,
    spike_share: float = 0.0,
) -> list[tuple[str, str, bytes]]:
    """(line, plant, payload) of `per_line` messages of 100 readings per line, interleaved by time."""
    rng = np.random.default_rng(seed)
    t0 = t0_ms if t0_ms is not None else int(time.time() * 1000) - 3_600_000
    out = []
    for k in range(per_line):
        for line in lines:
            spec = REF.specs[sku_of(line)]
            seq = np.arange(k * BATCH, (k + 1) * BATCH) + 1_000_000
            event = t0 + k * 200 + np.arange(BATCH) * 2
            sensors = ((spec.lo + spec.hi) / 2)[:, None] + rng.normal(0, 1, (3, BATCH)) * (
                (spec.hi - spec.lo) / 12
            )[:, None]
            if spike_share and rng.random() < spike_share:
                sensors[0, int(rng.integers(BATCH))] = 9999.9
            verdict = np.ones(BATCH, dtype=np.uint8)
            payload = encode(fmt, line, sku_of(line), seq, event, verdict, sensors, sent_ms=int(event[-1]))
            out.append((line, REF.plant_of_line[line], payload))
    return out


# -- 1. scoring alone --------------------------------------------------------------------
def scoring_alone(fmt: str, readings: int) -> dict:
    per_line = max(1, readings // (BATCH * len(LINES)))
    msgs = make_messages(LINES, per_line, fmt)
    s = settings(url="nats://unused:4222")
    proc = PartitionProcessor(s, REF)
    stored = int(time.time() * 1000)
    warm_up()  # as the monitor does before its first message
    cpu = time.process_time()
    for seq, (line, plant, payload) in enumerate(msgs, start=1):
        proc.process(f"dayclose.tele.live.0.{plant}.{line}", payload, seq, stored)
    spent = time.process_time() - cpu
    n = len(msgs) * BATCH
    assert proc.counters["scored"] == n
    return {"format": fmt, "readings": n, "cpu_s": round(spent, 3), "readings_per_cpu_s": round(n / spent)}


# -- helpers for the NATS parts ------------------------------------------------------------
class Stream:
    """A private nats-server with the streams set up, for one part of the benchmark."""

    def __init__(self, workdir: Path, name: str):
        self.dir = workdir / name
        self.server = PrivateServer(settings(), store=self.dir / "nats")

    def __enter__(self) -> StreamSettings:
        self.server.start()
        self.settings = settings(url=self.server.url)
        asyncio.run(setup(self.settings, LINES))
        return self.settings

    def __exit__(self, *exc) -> None:
        self.server.stop()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            # the one server under two names: the live path listens on two connections, as it
            # does on a cluster (live.LISTENERS), so a worker receives each live message three times
            NATS_URL=f"{self.settings.url},{self.settings.url.replace('127.0.0.1', 'localhost')}",
            DAYCLOSE_STREAM_PREFIX=self.settings.prefix,
            DAYCLOSE_STREAM_PARTITIONS=str(self.settings.partitions),
            DAYCLOSE_DUCKDB=str(self.dir / "warehouse.duckdb"),
            DAYCLOSE_TARGET="duckdb",
        )
        return env

    def monitor(
        self, stats: Path, idle_exit: float | None = None, live_path: bool = True
    ) -> subprocess.Popen:
        args = [sys.executable, "-m", "dayclose.cli", "monitor", "--stats", str(stats)]
        if idle_exit:
            args += ["--idle-exit", str(idle_exit)]
        if not live_path:
            args += ["--no-live-path"]
        return subprocess.Popen(args, env=self.env(), cwd=PROJECT)


class Gateways:
    """The bench's gateways as deployed (gateway.Plants._publish): every message with its
    Nats-Msg-Id (<line>:<first plc_seq>:<count>), a live one first as a core NATS copy on the lane
    `now` (live.LiveSender), then to JetStream. Without live_path, no copies (the design before
    decision 0006)."""

    def __init__(self, s: StreamSettings, nc, live_path: bool):
        self.s = s
        self.js = nc.jetstream()
        self.sender = LiveSender(nc) if live_path else None

    async def publish(self, lane: str, plant: str, line: str, payload: bytes, msg_id: str):
        headers = {"Nats-Msg-Id": msg_id}
        if lane == "live" and self.sender is not None:
            await self.sender.send(self.s.ingress_subject(LIVE_LANE, plant, line), payload, headers)
        return await self.js.publish_async(
            self.s.ingress_subject(lane, plant, line), payload, headers=headers
        )


class CPU:
    """CPU-seconds (user + system) of processes since start(): this one (the gateways) and others
    by pid (the monitor worker, nats-server)."""

    def __init__(self, **pids: int):
        self.pids = {**pids, "gateways": os.getpid()}
        self.start()

    def _now(self) -> dict[str, float]:
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for name, pid in self.pids.items():  # utime and stime, fields 14 and 15 of /proc/<pid>/stat
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / tick
        return out

    def start(self) -> None:
        self.since = self._now()
        self.load = os.getloadavg()
        self.wall = time.monotonic()

    def spent(self) -> dict:
        now = self._now()
        return {
            "wall_s": round(time.monotonic() - self.wall, 2),
            "load_average_before": [round(x, 2) for x in self.load],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            **{f"{name}_cpu_s": round(now[name] - self.since[name], 3) for name in now},
        }


async def publish_all(
    s: StreamSettings, msgs: list[tuple[str, str, bytes]], lane: str = "live", ids: list[str] | None = None
) -> float:
    """Publish as fast as the server takes it (with their Nats-Msg-Id when given, as the
    gateways do); returns the seconds it took."""
    nc = await connect(s, "bench-publisher")
    js = nc.jetstream()
    started = time.monotonic()
    pending = []
    for i, (line, plant, payload) in enumerate(msgs):
        headers = {"Nats-Msg-Id": ids[i]} if ids is not None else None
        pending.append(await js.publish_async(s.ingress_subject(lane, plant, line), payload, headers=headers))
        if len(pending) >= 4000:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    took = time.monotonic() - started
    await nc.close()
    return took


def drain_with_monitor(workdir: Path, fmt: str, readings: int) -> dict:
    stream = Stream(workdir, f"drain-{fmt}")
    with stream as s:
        msgs = make_messages(LINES, max(1, readings // (BATCH * len(LINES))), fmt)
        took = asyncio.run(publish_all(s, msgs))
        log(f"{fmt}: {len(msgs) * BATCH:,} readings stored in {took:.1f} s; one monitor worker drains them")
        stats_path = stream.dir / "monitor.json"
        proc = stream.monitor(stats_path, idle_exit=2)
        proc.wait()
        stats = json.loads(stats_path.read_text())
    n = len(msgs) * BATCH
    assert stats["readings"] == n, stats
    return {
        "format": fmt,
        "readings": n,
        "busy_cpu_s": stats["busy_cpu_s"],
        "readings_per_cpu_s": round(n / stats["busy_cpu_s"]),
        "process_cpu_s": stats["cpu_s"],
        "readings_per_process_cpu_s": round(n / stats["cpu_s"]),
        "wall_s_incl_idle_exit": stats["wall_s"],
    }


def latency(workdir: Path, seconds: float, rate: int = 50_000, live_path: bool = True) -> dict:
    lines = LINES[: rate // 500]
    stream = Stream(workdir, "latency")
    sent_at: dict[tuple[str, int], int] = {}  # (line, message) -> when the gateway sent it (ms)
    with stream as s:
        stats_path = stream.dir / "monitor.json"
        monitor = stream.monitor(stats_path, live_path=live_path)
        time.sleep(2.0)
        rounds = int(seconds * 5)
        cpu = CPU(monitor=monitor.pid, server=stream.server.process.pid)

        async def offer() -> int:
            nc = await connect(s, "bench-gateways", buffer_while_reconnecting=False)
            gateways = Gateways(s, nc, live_path)
            sent = 0
            cpu.start()
            start = time.time()
            rng = np.random.default_rng(1)
            pending = []
            for k in range(rounds):
                due = start + (k + 1) * 0.2
                await asyncio.sleep(max(0.0, due - time.time()))
                now_ms = int(time.time() * 1000)
                for line in lines:  # the last 200 ms of the line's readings, sent now
                    spec = REF.specs[sku_of(line)]
                    seq = np.arange(k * BATCH, (k + 1) * BATCH) + 1_000_000
                    event = now_ms - 200 + np.arange(BATCH) * 2
                    sensors = ((spec.lo + spec.hi) / 2)[:, None] + rng.normal(0, 1, (3, BATCH)) * (
                        (spec.hi - spec.lo) / 12
                    )[:, None]
                    if rng.random() < 0.01:
                        sensors[0, int(rng.integers(BATCH))] = 9999.9
                    sent_ms = int(time.time() * 1000)
                    payload = encode(
                        "binary", line, sku_of(line), seq, event, np.ones(BATCH, np.uint8), sensors, sent_ms
                    )
                    sent_at[(line, k)] = sent_ms
                    msg_id = f"{line}:{int(seq[0])}:{BATCH}"
                    pending.append(
                        await gateways.publish("live", REF.plant_of_line[line], line, payload, msg_id)
                    )
                    sent += BATCH
                if len(pending) > 2000:
                    await asyncio.gather(*pending)
                    pending = []
            await asyncio.gather(*pending)
            offered = sent / (time.time() - start)
            await nc.close()
            return offered

        offered = asyncio.run(offer())
        time.sleep(3.0)
        spent = cpu.spent()
        monitor.terminate()
        monitor.wait()
        stats = json.loads(stats_path.read_text())
        alerts = asyncio.run(_alerts(s))
    opened = [a for a in alerts if a["event"] == "open" and a["lane"] == "live"]
    # publish -> alert the same way with and without the live path: from when the gateway sent
    # the message of the alert's reading (the alerts' own latency_ms counts from the stream's
    # arrival on the stored path) to the alert raised
    lat = sorted(
        _wall(a["raised_at"], 0) * 1000 - sent_at[(a["line_id"], (a["opened_plc_seq"] - 1_000_000) // BATCH)]
        for a in opened
    )
    from_reading = sorted(a["reading_to_alert_ms"] for a in opened)

    def p99(xs: list[float]) -> float | None:
        return round(xs[min(len(xs) - 1, int(0.99 * len(xs)))], 1) if xs else None

    readings = rounds * len(lines) * BATCH
    assert stats["readings"] == readings, (stats["readings"], readings)
    return {
        "live_path": live_path,
        "offered_readings_per_s": round(offered),
        "lines": len(lines),
        "seconds": seconds,
        "readings": readings,
        "readings_scored_first_from_the_live_path": stats["live_readings"],
        "alerts_opened": len(opened),
        "p99_publish_to_alert_ms": p99(lat),
        "p50_publish_to_alert_ms": round(lat[len(lat) // 2], 1) if lat else None,
        "p99_reading_to_alert_ms": p99(from_reading),
        "p99_publish_to_scored_ms": stats["latency_ms"]["p99"],
        "monitor_cpu_s_whole_process": stats["cpu_s"],
        "cpu": spent,  # from the first message offered to 3 s after the last
        "readings_per_monitor_cpu_s": round(readings / spent["monitor_cpu_s"]),
        "readings_per_gateway_cpu_s": round(readings / spent["gateways_cpu_s"]),
    }


async def _alerts(s: StreamSettings) -> list[dict]:
    nc = await connect(s, "bench-alerts")
    js = nc.jetstream()
    info = await js.stream_info(s.alerts_stream)
    out = []
    if info.state.messages:
        sub = await js.subscribe(f"{s.prefix}.alerts.>", ordered_consumer=True)
        while len(out) < info.state.messages:
            out.append(json.loads((await sub.next_msg(timeout=10)).data))
    await nc.close()
    return out


def backlog(workdir: Path, hours: float, live_rate: int = 10_000, live_path: bool = True) -> dict:
    per_line_rate = 231_481 / 600  # 5x of 4 billion a day, over 600 lines
    per_line = int(per_line_rate * hours * 3600)
    plant = "P-150"
    plant_lines = [ln for ln in LINES if REF.plant_of_line[ln] == plant]
    log(f"backlog: encoding {per_line * len(plant_lines):,} readings of {plant} ({hours:g} h at 5x)")
    msgs = make_messages(
        plant_lines, per_line // BATCH, "binary", seed=2, t0_ms=int(time.time() * 1000) - int(hours * 3.6e6)
    )
    ids = [
        f"{line}:{1_000_000 + k * BATCH}:{BATCH}" for k in range(per_line // BATCH) for line in plant_lines
    ]
    live_lines = [ln for ln in LINES if REF.plant_of_line[ln] != plant][: live_rate // 100]
    stream = Stream(workdir, "backlog")
    with stream as s:
        stats_path = stream.dir / "monitor.json"
        monitor = stream.monitor(stats_path, live_path=live_path)
        time.sleep(2.0)
        cpu = CPU(monitor=monitor.pid, server=stream.server.process.pid)

        async def run() -> tuple[float, float, dict]:
            nc = await connect(s, "bench-live", buffer_while_reconnecting=False)
            gateways = Gateways(s, nc, live_path)
            stop = asyncio.Event()

            async def live() -> None:
                rng = np.random.default_rng(3)
                k = 0
                start = time.time()
                while not stop.is_set():
                    k += 1
                    await asyncio.sleep(max(0.0, start + k * 0.2 - time.time()))
                    now_ms = int(time.time() * 1000)
                    for line in live_lines:  # 20 readings per line per 200 ms: 100/s each
                        spec = REF.specs[sku_of(line)]
                        seq = np.arange(k * 20, k * 20 + 20) + 1_000_000
                        sensors = ((spec.lo + spec.hi) / 2)[:, None] + rng.normal(0, 0.1, (3, 20))
                        payload = encode(
                            "binary",
                            line,
                            sku_of(line),
                            seq,
                            now_ms - 200 + seq % 20 * 10,
                            np.ones(20, np.uint8),
                            sensors,
                            now_ms,
                        )
                        msg_id = f"{line}:{int(seq[0])}:20"
                        await gateways.publish("live", REF.plant_of_line[line], line, payload, msg_id)

            task = asyncio.create_task(live())
            await asyncio.sleep(3.0)
            cpu.start()
            started = time.time()
            took = await publish_all(s, msgs, lane="backfill", ids=ids)
            await asyncio.sleep(1.0)
            total = len(msgs) * BATCH
            while await backfill_scored(s, plant_lines) < total and time.time() - started < 600:
                await asyncio.sleep(0.5)  # until the monitor's checkpoints hold the whole backlog
            spent = cpu.spent()
            stop.set()
            await task
            await nc.close()
            return started, took, spent

        started, took, spent = asyncio.run(run())
        monitor.terminate()
        monitor.wait()
        stats = json.loads(stats_path.read_text())
    total = len(msgs) * BATCH
    assert stats["backfill"]["readings"] == total, stats["backfill"]
    return {
        "live_path": live_path,
        "backlog_readings": total,
        "hours": hours,
        "replay_published_in_s": round(took, 1),
        "drained_s_from_replay_start": round(stats["backfill"]["last_at"] - started, 1),
        "live_rate": live_rate,
        "live_p99_ms_during_drain": stats["backfill"]["live_p99_ms_meanwhile"],
        "readings_scored_first_from_the_live_path": stats["live_readings"],
        "monitor_cpu_s_whole_process": stats["cpu_s"],
        # from the replay's first message to the checkpoints holding all of it; the gateways'
        # CPU is this process's: the replay (JetStream only) and the live lines (copies too)
        "cpu": spent,
        "backlog_readings_per_monitor_cpu_s": round(total / spent["monitor_cpu_s"]),
    }


async def backfill_scored(s: StreamSettings, lines: list[str]) -> int:
    """Backfill readings of these lines scored so far, from the monitor's checkpoints."""
    nc = await connect(s, "bench-progress")
    try:
        kv = await nc.jetstream().key_value(s.state_bucket)
        blobs = []
        for key in await kv.keys():
            if key.startswith("monitor-backfill"):
                blobs.append((await kv.get(key)).value)
    except NoKeysError:  # no checkpoint yet
        return 0
    finally:
        await nc.close()
    done = progress(blobs)
    return sum(done.get(f"{line}|backfill", {}).get("scored", 0) for line in lines)


def archiver(workdir: Path, readings: int) -> dict:
    with Stream(workdir, "archive") as s:
        msgs = make_messages(LINES, max(1, readings // (BATCH * len(LINES))), "binary")
        asyncio.run(publish_all(s, msgs))
        n = len(msgs) * BATCH
        arch = Archiver(s, workdir / "archive" / "landing")

        async def run() -> float:
            stop = asyncio.Event()

            async def watch() -> None:
                while arch.stats.lines < n:
                    await asyncio.sleep(0.05)
                stop.set()

            started = time.monotonic()
            await asyncio.gather(arch.run(stop), watch())
            return time.monotonic() - started

        cpu = time.process_time()
        wall = asyncio.run(run())
        cpu = time.process_time() - cpu
    return {
        "readings": n,
        "wall_s": round(wall, 2),
        "readings_per_s": round(n / wall),
        "cpu_s": round(cpu, 2),
    }


# -- 6. a node lost, twice, on a 3-node cluster ----------------------------------------------
SENSORS = ("fill_level_ml", "capper_torque_nm", "temperature_c")


def _pct(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else None


def _landing_against_truth(landing: Path, truth: Truth) -> dict:
    """The archived landing against the simulator's truth, reading by reading."""
    expected: set[tuple[str, int]] = set()
    for (line, _lane), (_n, first, last) in truth.lines.items():
        expected.update((line, seq) for seq in range(first, last + 1))
    lines = real = 0
    arrivals: dict[tuple[str, int], set[str]] = {}
    for part in (landing / "units").glob("arrived=*/part-*.jsonl"):
        with open(part) as fh:
            for text in fh:
                lines += 1
                d = json.loads(text)
                if not isinstance(d.get("plc_seq"), int) or d.get("sku") is None:
                    continue  # an undecodable payload's line
                if (
                    not all(isinstance(d[f], float | int) for f in SENSORS)
                    or d["event_at"] > d["received_at"]
                ):
                    continue  # a garbage copy (a NaN sensor, stamped in the future)
                real += 1
                arrivals.setdefault((d["line_id"], d["plc_seq"]), set()).add(d["received_at"])
    got = set(arrivals)
    return {
        "readings_published": len(expected),
        "readings_landed_distinct": len(got & expected),
        "readings_lost": len(expected - got),
        "readings_unknown": len(got - expected),
        "readings_stored_twice": sum(1 for stamps in arrivals.values() if len(stamps) > 1),
        "landed_lines": lines,
        "landed_copies_of_a_line": real - len(got),  # written again after a redelivery: dedup's work
    }


def cluster(workdir: Path, seconds: float, rate: int, down_s: float = 15.0, live_path: bool = True) -> dict:
    offset, _day = past_night(seconds_before_2am=seconds + 5)
    folder = workdir / "cluster"
    before = os.environ.get("DAYCLOSE_DUCKDB")
    os.environ["DAYCLOSE_DUCKDB"] = str(folder / "warehouse.duckdb")  # the alerts sink's line_alerts
    try:
        return _cluster(folder, offset, seconds, rate, down_s, live_path)
    finally:
        if before is None:
            os.environ.pop("DAYCLOSE_DUCKDB", None)
        else:
            os.environ["DAYCLOSE_DUCKDB"] = before


def _cluster(folder: Path, offset: float, seconds: float, rate: int, down_s: float, live_path: bool) -> dict:
    with PrivateCluster(settings(clock_offset_s=offset), store=folder / "nats") as nodes:
        s = settings(url=nodes.url, replicas=3, clock_offset_s=offset)
        asyncio.run(setup(s, LINES))
        scenario = build_scenario(
            plants=10,
            rate=rate,
            duration_s=seconds,
            seed=7,
            backlog_hours=0,
            reconnect_after_s=0,
            clock_offset_s=offset,
            extra_spikes=int(2 * seconds),
        )
        names = [n.name for n in nodes.nodes]
        losses: list[tuple[str, bool, NodeLoss]] = []
        ready: list[float] = []

        async def monitor_ready(js) -> float:
            """When the monitor has acknowledged a live message: it has opened its consumers."""
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                for k in range(s.partitions):
                    try:
                        info = await retrying(
                            lambda k=k: js.consumer_info(s.telemetry_stream, f"monitor-live-{k:03d}")
                        )
                    except NotFoundError:
                        continue
                    if info.ack_floor and info.ack_floor.stream_seq:
                        return time.time()
                await asyncio.sleep(0.2)
            raise RuntimeError("the monitor acknowledged nothing within 120 s")

        async def kill_nodes(plants: Plants, monitor: Stats) -> None:
            while plants.nc is None or plants.nc.connected_url is None:
                await asyncio.sleep(0.05)
            js = plants.nc.jetstream()
            ready.append(await monitor_ready(js))
            at = ready[0] + 10.0
            for whose in ("other", "gateways"):
                await asyncio.sleep(max(0.0, at - time.time()))
                while plants.nc.connected_url is None:
                    await asyncio.sleep(0.05)
                theirs = nodes.node_of(plants.nc.connected_url.geturl())
                info = await retrying(lambda: js.stream_info(s.telemetry_stream))
                leader = names.index(info.cluster.leader)
                listened = {nodes.node_of(netloc) for netloc in monitor.live_nodes if netloc}
                if whose == "gateways":
                    victim = theirs
                else:  # as the test: the telemetry leader, else a node the live path listens on
                    others = [i for i in range(3) if i != theirs]
                    victim = max(others, key=lambda i: (i == leader, i in listened))
                log(
                    f"cluster: kill -9 {names[victim]} ({whose}; telemetry leader: {victim == leader}; "
                    f"live path listening there: {victim in listened})"
                )
                loss = await nodes.lose(victim, down_s)
                log(
                    f"cluster: {loss.node} leaders back after {loss.leaders_back - loss.killed:.1f} s, "
                    f"caught up {loss.caught_up - loss.restarted:.1f} s after its restart"
                )
                losses.append((whose, victim == leader, victim in listened, loss))
                at = loss.caught_up + 5.0

        log(f"cluster: {len(scenario.lines)} lines, {rate:,} readings/s for {seconds:.0f} s")
        session = asyncio.run(
            run_session(
                s,
                scenario,
                folder / "sim",
                folder / "landing",
                "duckdb",
                alongside=kill_nodes,
                live_path=live_path,
            )
        )
        ended = session.started_wall + seconds
        deadline = time.monotonic() + 60  # nothing is published now: the copies converge
        while len({json.dumps(_copies(nodes, i), sort_keys=True) for i in range(3)}) > 1:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        copies = [_copies(nodes, i) for i in range(3)]
        alerts = asyncio.run(_alerts(s))
    stats, truth = session.monitor, session.plants.truth
    phases = {"before": (ready[0], losses[0][3].killed)}
    for i, (_whose, _led, _listened, loss) in enumerate(losses, start=1):
        phases.update({f"loss {i} {name}": span for name, span in loss.phases().items()})
    phases["after"] = (losses[-1][3].caught_up, ended)
    by_phase = {}
    for name, (since, until) in phases.items():
        lat = [
            ms
            for t, ms in zip(stats.latency_at, stats.latency_ms, strict=True)
            if since <= t - ms / 1000 < until
        ]
        paged = [
            a
            for a in alerts
            if a["event"] == "open" and a["paged"] and since <= _wall(a["raised_at"], offset) < until
        ]
        by_phase[name] = {
            "seconds": round(until - since, 1),
            "messages": len(lat),
            "p50_publish_to_alert_ms": _pct(lat, 0.5),
            "p99_publish_to_alert_ms": _pct(lat, 0.99),
            "max_publish_to_alert_ms": round(max(lat), 1) if lat else None,
            "alerts_paged": len(paged),
            "p99_reading_to_alert_ms": _pct(
                [a["reading_to_alert_ms"] for a in paged if a["reading_to_alert_ms"] is not None], 0.99
            ),
        }
    return {
        "rate": rate,
        "seconds": seconds,
        "lines": len(scenario.lines),
        "down_s": down_s,
        "losses": [
            {
                "node": loss.node,
                "whose": whose,
                "telemetry_leader": led,
                "live_path_listened_there": listened,
                "leaders_back_s": round(loss.leaders_back - loss.killed, 2),
                "catch_up_s": round(loss.caught_up - loss.restarted, 2),
            }
            for whose, led, listened, loss in losses
        ],
        "phases": by_phase,
        "published": {
            "messages": truth.messages,
            "readings": truth.readings,
            "resent_after_a_loss": truth.resent,
            "duplicates_acknowledged": truth.duplicates_acked,
            "live_copies": truth.live_copies,
            "live_copies_resent_after_a_reconnect": truth.live_resent,
        },
        "monitor": {
            "readings_scored": stats.readings,
            "alerts": stats.alerts,
            "consumers_realigned": stats.realigned,
            "live_path": live_path,
            "readings_scored_first_from_the_live_path": stats.live_readings,
            "live_listener_moves": stats.live_moves,
        },
        "archiver": {"consumer_resets": session.archive.realigned if session.archive else None},
        "landing": _landing_against_truth(folder / "landing", truth),
        "node_copies_equal_at_end": len({json.dumps(c, sort_keys=True) for c in copies}) == 1,
    }


def _copies(nodes: PrivateCluster, i: int) -> dict:
    doc = nodes.nodes[i].monitoring("/jsz?streams=true") or {}
    return {
        st["name"]: st["state"]["last_seq"]
        for account in doc.get("account_details", [])
        for st in account.get("stream_detail", [])
    }


def _wall(stamp: str, offset: float) -> float:
    """A plant-clock ISO time as this machine's wall clock."""
    return datetime.fromisoformat(stamp.rstrip("Z")).replace(tzinfo=UTC).timestamp() - offset


PARTS = ("scoring", "drain", "latency", "backlog", "archiver", "cluster")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller volumes: a smoke run")
    parser.add_argument(
        "--parts", nargs="+", choices=PARTS, default=list(PARTS), help="the parts to run (default all)"
    )
    parser.add_argument(
        "--no-live-path",
        action="store_true",
        help="latency, backlog, cluster: the gateways send no core NATS copies and the monitor scores "
        "only what JetStream delivers (the design before live.py)",
    )
    parser.add_argument(
        "--latency-rate",
        type=int,
        default=50_000,
        help="latency: readings/s offered, 500 a line (at most 300,000; 231,481 is 5x the incident's volume)",
    )
    args = parser.parse_args(argv)
    q = args.quick
    RESULTS.mkdir(exist_ok=True)
    out: dict = {
        "machine": machine(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "parts": args.parts,
        "quick": q,
    }
    with tempfile.TemporaryDirectory(prefix="dayclose-bench-stream-") as tmp:
        work = Path(tmp)
        if "scoring" in args.parts:
            log("1. scoring alone (decode included)")
            out["scoring_alone"] = [
                scoring_alone("binary", 600_000 if q else 6_000_000),
                scoring_alone("jsonl", 300_000 if q else 1_200_000),
            ]
        if "drain" in args.parts:
            log("2. one monitor worker draining a stream")
            out["monitor_worker"] = [
                drain_with_monitor(work, "binary", 600_000 if q else 6_000_000),
                drain_with_monitor(work, "jsonl", 300_000 if q else 1_200_000),
            ]
        if "latency" in args.parts:
            log(f"3. latency at {args.latency_rate:,} readings/s offered")
            out["latency"] = latency(
                work, 10 if q else 30, args.latency_rate, live_path=not args.no_live_path
            )
        if "backlog" in args.parts:
            log("4. a 4-hour backlog at 5x while live traffic flows")
            out["backlog"] = backlog(work, 0.25 if q else 4.0, live_path=not args.no_live_path)
        if "archiver" in args.parts:
            log("5. archiver")
            out["archiver"] = archiver(work, 300_000 if q else 3_000_000)
        if "cluster" in args.parts:
            log("6. a 3-node cluster loses a node twice while plants publish")
            out["cluster"] = cluster(
                work, 60 if q else 90, 5_000 if q else 20_000, live_path=not args.no_live_path
            )
    path = RESULTS / f"stream-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
