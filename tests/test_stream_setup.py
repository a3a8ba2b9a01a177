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
