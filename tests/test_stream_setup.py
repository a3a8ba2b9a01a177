"""`dayclose stream setup` on a real NATS: the streams, their settings, the partition mapping."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from dayclose.errors import DaycloseError
from dayclose.stream.config import TELEMETRY_DUPLICATE_WINDOW_S, settings
from dayclose.stream.streams import connect, setup
from dayclose.stream.wire import encode_binary
from tests.stream_fixtures import line_ids


def test_setup_is_idempotent_and_the_streams_keep_what_they_must(nats) -> None:
    again = asyncio.run(setup(nats, line_ids()))
    assert {action for _, action in again.streams} == {"unchanged"}

    async def configs():
        nc = await connect(nats, "test")
        js = nc.jetstream()
        out = {
            name: (await js.stream_info(name)).config
            for name in (nats.telemetry_stream, nats.alerts_stream, nats.dead_stream)
        }
        await nc.close()
        return out

    telemetry = asyncio.run(configs())[nats.telemetry_stream]
    assert telemetry.retention == "limits" and telemetry.storage == "file"
    assert telemetry.max_age >= 48 * 3600
    assert telemetry.duplicate_window == TELEMETRY_DUPLICATE_WINDOW_S
    assert sorted(telemetry.subjects) == ["dayclose.tele.backfill.>", "dayclose.tele.live.>"]


def test_every_reading_of_a_line_lands_in_one_partition_and_a_retry_is_stored_once(nats) -> None:
    report = asyncio.run(setup(nats, line_ids()))
    assert set(report.partition_of_line.values()) == set(range(nats.partitions))

    async def publish() -> tuple[dict[str, set[int]], list[bool], int]:
        nc = await connect(nats, "test")
        js = nc.jetstream()
        duplicates = []
        for line in ("L-001-1", "L-001-2", "L-150-2", "L-300-1"):
            plant = "P-" + line.split("-")[1]
            for k in range(3):
                seq = np.arange(10 * k, 10 * k + 10)
                payload = encode_binary(
                    line, "PILS-330-BTL", seq, seq, np.ones(10, np.uint8), np.ones((3, 10)), 0
                )
                for lane in ("live", "backfill"):
                    for _ in range(2):  # the second is a retry of the same message
                        ack = await js.publish(
                            nats.ingress_subject(lane, plant, line),
                            payload,
                            headers={"Nats-Msg-Id": f"{line}{lane}{k}"},
                        )
                        duplicates.append(bool(ack.duplicate))
        info = await js.stream_info(nats.telemetry_stream)
        sub = await js.subscribe(nats.stored_filter(), ordered_consumer=True)
        where: dict[str, set[int]] = {}
        for _ in range(info.state.messages):
            msg = await sub.next_msg(timeout=5)
            lane, k, _plant, line = nats.parse_stored(msg.subject)
            where.setdefault(line, set()).add(k)
        await nc.close()
        return where, duplicates, info.state.messages

    where, duplicates, stored = asyncio.run(publish())
    assert stored == 4 * 3 * 2 and duplicates == [False, True] * 24
    assert where == {line: {report.partition_of_line[line]} for line in where}


def test_a_server_without_the_mapping_is_refused_with_the_configuration_to_add(nats) -> None:
    other = settings(url=nats.url, partitions=nats.partitions, prefix="otherplant")
    with pytest.raises(DaycloseError, match=r'mappings = \{\n  "otherplant.in.\*.\*.\*"'):
        asyncio.run(setup(other, line_ids()))
    bigger = settings(url=nats.url, partitions=nats.partitions * 2)
    with pytest.raises(DaycloseError, match="not K=8"):
        asyncio.run(setup(bigger, line_ids()))


def test_changing_k_drains_resets_and_goes_on_without_rescoring(tmp_path) -> None:
    """The documented procedure: drain, reload the mapping with the new K, setup, reset the
    monitors, start them --from new."""
    from dayclose.stream.gateway import build_scenario, simulate
    from dayclose.stream.monitor import run_worker
    from dayclose.stream.partition import progress
    from dayclose.stream.server import PrivateServer
    from dayclose.stream.streams import reset_monitors
    from tests.stream_fixtures import checkpoints, read_truth

    with PrivateServer(settings(partitions=4), store=tmp_path / "nats") as server:
        four = settings(url=server.url, partitions=4)
        asyncio.run(setup(four, line_ids()))
        asyncio.run(simulate(four, build_scenario(2, 200, 4, seed=1, backlog_hours=0.01), tmp_path / "a"))
        first = asyncio.run(run_worker(four, idle_exit=1.5, sink=False))
        assert first.readings == read_truth(tmp_path / "a")["run"]["readings"]
        server.reload(settings(url=server.url, partitions=8))
        eight = settings(url=server.url, partitions=8)
        with pytest.raises(DaycloseError, match="0..7, not K=4"):
            asyncio.run(setup(four, line_ids()))  # the old K no longer matches the server
        asyncio.run(setup(eight, line_ids()))
        consumers, states = asyncio.run(reset_monitors(eight))
        assert consumers == 2 * 4 + 1 and 0 < states <= consumers
        opened = asyncio.run(run_worker(eight, idle_exit=0.5, sink=False, from_new=True))
        assert opened.readings == 0  # started after the stream's last message
        asyncio.run(simulate(eight, build_scenario(3, 200, 4, seed=2, backlog_hours=0.03), tmp_path / "b"))
        second = asyncio.run(run_worker(eight, idle_exit=1.5, sink=False))
        truth = read_truth(tmp_path / "b")
        assert second.readings == truth["run"]["readings"]  # the new readings, and only those
        scored = progress(list(checkpoints(eight).values()))
        assert {k: v["scored"] for k, v in scored.items()} == {
            f"{line}|{lane}": n for (line, lane), (n, _, _) in truth["lines"].items()
        }
