"""The finance path reads the same stream: the archiver's landing, killed at random points."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from dayclose.jobs import run_nightly
from dayclose.settings import Target
from dayclose.stream.archive import Archiver
from dayclose.stream.config import settings
from dayclose.stream.gateway import build_scenario, simulate
from dayclose.stream.session import past_night
from dayclose.stream.wire import encode_binary
from tests.helpers import good_units
from tests.stream_fixtures import (
    as_of_after,
    env_for,
    read_truth,
    start_dayclose,
    stream_server,
)

pytestmark = pytest.mark.xdist_group("stream_archive")  # one worker builds the module's fixture, once

HOUR_MS = 3_600_000
H0 = 1_795_996_800_000  # 2026-11-30T00:00:00Z


@dataclass
class _Seq:
    stream: int


@dataclass
class _Meta:
    timestamp: datetime
    sequence: _Seq


@dataclass
class FakeMsg:
    """What the archiver reads of a JetStream message."""

    data: bytes
    subject: str
    metadata: _Meta
    reply: str = ""


def message(stored_ms: int, first_seq: int, n: int = 3) -> FakeMsg:
    seq = np.arange(first_seq, first_seq + n)
    sensors = np.array([[330.1] * n, [2.1] * n, [3.0] * n])
    payload = encode_binary(
        "L-001-1", "PILS-330-BTL", seq, stored_ms - 500 + seq % 100, np.ones(n, np.uint8), sensors, 0
    )
    stamp = datetime.fromtimestamp(stored_ms / 1000, UTC)
    return FakeMsg(payload, "dayclose.tele.live.1.P-001.L-001-1", _Meta(stamp, _Seq(first_seq)))


def folder_state(landing: Path) -> dict[str, tuple[bool, list[tuple[str, int]]]]:
    """Each batch folder: sealed?, and its files with their line counts."""
    out = {}
    for folder in sorted((landing / "units").glob("arrived=*")):
        files = [(p.name, p.read_bytes().count(b"\n")) for p in sorted(folder.glob("part-*.jsonl"))]
        out[folder.name.split("=")[1]] = ((folder / "_SUCCESS").exists(), files)
    return out


def check_manifests(landing: Path) -> int:
    """Every sealed batch's manifest matches its files exactly (names, rows, sha256); the lines."""
    lines = 0
    for marker in (landing / "units").glob("arrived=*/_SUCCESS"):
        manifest = json.loads(marker.read_text())
        assert manifest["source"] == "units" and manifest["batch"] == marker.parent.name.split("=")[1]
        files = sorted(p.name for p in marker.parent.iterdir() if p.name != "_SUCCESS")
        assert [f["name"] for f in manifest["files"]] == files
        for f in manifest["files"]:
            data = (marker.parent / f["name"]).read_bytes()
            assert (f["rows"], f["sha256"]) == (data.count(b"\n"), hashlib.sha256(data).hexdigest())
            assert not data or data.endswith(b"\n")
            lines += f["rows"]
    return lines


def landed_bytes(landing: Path) -> int:
    return sum(p.stat().st_size for p in (landing / "units").glob("arrived=*/part-*.jsonl"))


def test_an_hour_is_sealed_only_when_complete_and_quiet_hours_as_empty_batches(tmp_path: Path) -> None:
    s = settings(url="nats://unused:4222", partitions=4)
    archiver = Archiver(s, tmp_path, part_rows=4)
    archiver.recover()
    archiver.write([message(H0 + 600_000, 10), message(H0 + 700_000, 20)])
    assert archiver.seal(nothing_pending=False) == []  # nothing later seen: hour 00 may go on
    assert archiver.seal(nothing_pending=True, now_ms=H0 + HOUR_MS + 1000) == []  # within the grace
    archiver.write([message(H0 + HOUR_MS + 5_000, 30)])  # a message of hour 01: hour 00 is over
    assert archiver.seal(nothing_pending=False) == ["2026-11-30T00"]
    assert folder_state(tmp_path)["2026-11-30T00"] == (True, [("part-0000.jsonl", 4), ("part-0001.jsonl", 2)])
    # a process killed in the middle of a line: the cut line goes, new lines go to a new part
    part = tmp_path / "units" / "arrived=2026-11-30T01" / "part-0000.jsonl"
    part.write_bytes(part.read_bytes() + b'{"line_id": "L-001-1", "plc_')
    restarted = Archiver(s, tmp_path, part_rows=4)
    restarted.recover()
    assert part.read_bytes().count(b"\n") == 3 and part.read_bytes().endswith(b"\n")
    restarted.write([message(H0 + HOUR_MS + 9_000, 30)])  # redelivered after the kill: a copy
    restarted.write([message(H0 + 1_000, 10)])  # a copy of a message of a sealed hour: not written
    assert restarted.stats.skipped_sealed == 3
    assert restarted.seal(nothing_pending=True, now_ms=H0 + 4 * HOUR_MS + 3000) == [
        "2026-11-30T01",
        "2026-11-30T02",
        "2026-11-30T03",
    ]
    state = folder_state(tmp_path)
    assert state["2026-11-30T01"] == (True, [("part-0000.jsonl", 3), ("part-0001.jsonl", 3)])
    assert state["2026-11-30T02"] == state["2026-11-30T03"] == (True, [])
    assert check_manifests(tmp_path) == 12
    assert json.loads((tmp_path / "units/arrived=2026-11-30T02/_SUCCESS").read_text())["files"] == []
    assert not list((tmp_path / "units").glob(".*"))  # no temporary marker left


@pytest.fixture(scope="module")
def killed_archive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Plants publish for 16 s (a backlog included) while the archiver is killed with SIGKILL
    at random points and restarted; then it runs until every hour is sealed."""
    tmp = tmp_path_factory.mktemp("archive")
    offset, day = past_night(seconds_before_2am=26)
    with stream_server(tmp / "nats", clock_offset_s=offset) as s:
        env = env_for(s, tmp)
        landing, log = tmp / "landing", tmp / "archive.log"
        scenario = build_scenario(
            plants=3, rate=300, duration_s=16, seed=11, backlog_hours=1, clock_offset_s=offset
        )
        done = threading.Event()

        def publish() -> None:
            try:
                asyncio.run(simulate(s, scenario, tmp / "sim"))
            finally:
                done.set()

        rng = random.Random(11)
        archiver = start_dayclose(["archive", "--landing", str(landing)], env, log)
        publisher = threading.Thread(target=publish)
        publisher.start()
        started = time.monotonic()

        def restart() -> subprocess.Popen:
            os.kill(archiver.pid, signal.SIGKILL)
            archiver.wait()
            return start_dayclose(["archive", "--landing", str(landing)], env, log)

        try:
            time.sleep(rng.uniform(1.0, 4.0))  # during live traffic
            archiver = restart()
            writing_kills, size = 0, landed_bytes(landing)
            while writing_kills < 4 and time.monotonic() - started < 40:
                time.sleep(0.02)
                now = landed_bytes(landing)
                if now - size > 50_000:  # in the middle of writing the replay: kill at a random instant
                    time.sleep(rng.uniform(0.0, 0.02))
                    archiver = restart()
                    writing_kills += 1
                size = now
            publisher.join(60)
            time.sleep(rng.uniform(0.0, 3.0))  # waiting for the hour to end, or sealing it
            archiver = restart()
            publisher.join(60)
            assert done.is_set()
            archiver.send_signal(signal.SIGTERM)
            archiver.wait(30)
            final = start_dayclose(["archive", "--landing", str(landing), "--idle-exit", "2"], env, log)
            assert final.wait(90) == 0
        finally:
            if archiver.poll() is None:
                archiver.kill()
            publisher.join(5)
        yield {"landing": landing, "truth": read_truth(tmp / "sim"), "log": log.read_text(), "day": day}


def test_archiver_killed_at_random_points_lands_every_reading_under_complete_markers(killed_archive) -> None:
    landing, truth = killed_archive["landing"], killed_archive["truth"]
    assert "consumer reset" in killed_archive["log"], "no kill left messages unacknowledged"
    state = folder_state(landing)
    assert state and all(sealed for sealed, _ in state.values())
    lines = check_manifests(landing)
    seen: dict[str, set[int]] = {}
    for part in (landing / "units").glob("arrived=*/part-*.jsonl"):
        for text in part.read_text().splitlines():
            doc = json.loads(text)
            if isinstance(doc.get("plc_seq"), int):
                seen.setdefault(doc["line_id"], set()).add(doc["plc_seq"])
    for (line, _lane), (n, first, last) in truth["lines"].items():
        assert n == last - first + 1  # published plc_seq ranges are contiguous
        assert set(range(first, last + 1)) <= seen[line], line
    published = sum(n for n, _, _ in truth["lines"].values()) + truth["run"]["garbage_messages"]
    assert lines >= published  # duplicates allowed, losses not


# the archive's files are the same whatever reads them: the nightly job on DuckDB (the units
# path on Postgres: tests/test_units_path.py, tests/test_postgres_agrees.py)
@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)
def test_the_nightly_units_job_on_the_archived_landing_gives_the_truth(
    killed_archive, engine: Target
) -> None:
    summary = run_nightly(
        "units", engine, killed_archive["landing"], as_of_after(killed_archive["day"]), quiet=True
    )
    assert summary.ok, summary.lines()
    assert good_units(engine) == killed_archive["truth"]["good"]
