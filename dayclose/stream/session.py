"""The whole streaming path in one process: gateways, a monitor worker and the archiver.

For the demo and the tests: the simulated plants publish while a monitor worker and the
archiver consume; once the plants are done, each consumer stops when it has been idle for
a moment (the archiver also waits until every hour it wrote is sealed). Production runs
the same pieces as separate processes (`dayclose simulate|monitor|archive`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dayclose.stream.archive import Archiver, ArchiveStats
from dayclose.stream.config import StreamSettings
from dayclose.stream.gateway import Plants, Scenario
from dayclose.stream.monitor import Stats, run_worker


def past_night(seconds_before_2am: float) -> tuple[float, datetime]:
    """A plants' clock offset that makes now read `seconds_before_2am` before 02:00 UTC
    yesterday, and that day (00:00). A run then stays in one arrival hour that ends seconds
    after it, and a 4-hour backlog crosses midnight: the nightly job can be run on its landing
    at once (tests, demo) without waiting for a real hour to end."""
    now = time.time()
    day = (int(now) // 86400 - 1) * 86400
    return day + 2 * 3600 - seconds_before_2am - now, datetime.fromtimestamp(day, UTC).replace(tzinfo=None)


@dataclass
class Session:
    plants: Plants
    monitor: Stats | None
    archive: ArchiveStats | None
    archiver: Archiver | None
    started_wall: float  # time.time() when the plants started


async def run_session(
    settings: StreamSettings,
    scenario: Scenario,
    out: Path,
    landing: Path | None = None,
    target_name: str | None = None,
    monitor: bool = True,
    idle_s: float = 2.0,
    log=None,
    alongside: Callable[[Plants, Stats], Awaitable[None]] | None = None,
    live_path: bool = True,
) -> Session:
    """Publish the scenario while monitoring and archiving it; return when all is consumed.

    `alongside(plants, monitor_stats)` runs beside the plants from their start (a test killing
    cluster nodes); the consumers are not stopped before it has returned. Without live_path the
    monitor scores only what JetStream delivers (monitor.run_worker)."""
    plants = Plants(settings, scenario, log)
    started = time.time()
    plants_done = asyncio.Event()
    stop_monitor, stop_archive = asyncio.Event(), asyncio.Event()

    async def publish() -> None:
        try:
            await plants.run()
            plants.write_truth(out)
        finally:
            plants_done.set()

    tasks = [asyncio.create_task(publish())]
    monitor_task = archive_task = None
    archiver = Archiver(settings, landing) if landing is not None else None
    watched = Stats()
    if monitor:
        monitor_task = asyncio.create_task(
            run_worker(settings, 0, 1, target_name, stop_monitor, stats=watched, live_path=live_path)
        )
        tasks.append(monitor_task)
    if archiver is not None:
        archive_task = asyncio.create_task(archiver.run(stop_archive))
        tasks.append(archive_task)

    beside = asyncio.create_task(alongside(plants, watched)) if alongside is not None else None

    async def stop_when_idle() -> None:
        await plants_done.wait()
        if beside is not None:
            await beside
        last = (0, 0)
        quiet_since = time.monotonic()
        while not (stop_monitor.is_set() and stop_archive.is_set()):
            await asyncio.sleep(0.2)
            seen = (archiver.stats.messages if archiver else 0, watched.messages)
            if seen != last:
                last, quiet_since = seen, time.monotonic()
            if time.monotonic() - quiet_since >= idle_s:
                stop_monitor.set()
                if archiver is None or not archiver.hours:
                    stop_archive.set()

    tasks.append(asyncio.create_task(stop_when_idle()))
    if beside is not None:
        tasks.append(beside)
    try:
        await tasks[0]
        if beside is not None:
            await beside
        stats = await monitor_task if monitor_task else None
        astats = await archive_task if archive_task else None
    finally:
        stop_monitor.set()
        stop_archive.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    return Session(plants, stats, astats, archiver, started)
