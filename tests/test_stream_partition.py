"""A partition's scoring without NATS: garbage, copies, redelivery, lanes, checkpoints, and the
live path beside the stored one."""

from __future__ import annotations

import json
import time
import zlib
from functools import partial

import numpy as np

from dayclose.stream.config import LIVE_LANE, settings
from dayclose.stream.detectors import Reference
from dayclose.stream.live import LiveFeed
from dayclose.stream.monitor import Stats
from dayclose.stream.partition import PartitionProcessor
from dayclose.stream.wire import encode_binary, encode_jsonl

S = settings(url="nats://unused:4222", partitions=4, prefix="dayclose")
REF = Reference.from_seeds()
LINE, PLANT, SKU = "L-001-1", "P-001", "PILS-330-BTL"
SPEC = REF.specs[SKU]
T0 = 1_795_000_000_000  # plant clock, ms


def subject(lane: str = "live", line: str = LINE, plant: str = PLANT) -> str:
    return f"dayclose.tele.{lane}.1.{plant}.{line}"


def readings(first_seq: int, n: int, t0: int = T0, fill: float | None = None, period: int = 10):
    seq = np.arange(first_seq, first_seq + n)
    event = t0 + np.arange(n) * period
    verdict = np.ones(n, dtype=np.uint8)
    rng = np.random.default_rng(first_seq)
    sensors = ((SPEC.lo + SPEC.hi) / 2)[:, None] + rng.normal(0, 0.05, (3, n))
    if fill is not None:
        sensors[0] = fill
    return seq, event, verdict, sensors


def binary(first_seq: int, n: int, **kw) -> bytes:
    seq, event, verdict, sensors = readings(first_seq, n, **kw)
    return encode_binary(LINE, SKU, seq, event, verdict, sensors, sent_ms=int(event[-1]))


def processor() -> PartitionProcessor:
    return PartitionProcessor(S, REF, clock=lambda: T0 / 1000 + 3600)


def test_garbage_is_dead_lettered_with_its_reason_and_the_rest_is_scored() -> None:
    p = processor()
    seq, event, verdict, sensors = readings(100, 6)
    sensors[0, 1] = np.nan
    verdict[2] = 7
    event[3] += 26 * 3_600_000
    sensors[1, 4] = np.inf
    out = p.process(subject(), encode_binary(LINE, SKU, seq, event, verdict, sensors, 0), 1, T0 + 1000)
    reasons = sorted(d.reason for d in out.dead)
    assert reasons[0] == "capper_torque_nm: Infinity"
    assert reasons[1].startswith("event_at ") and reasons[1].endswith(
        "h after the reading reached the server"
    )
    assert reasons[2:] == ["fill_level_ml: NaN", "verdict code 7 (expected 1 good or 0 reject)"]
    assert out.scored == 2
    assert json.loads(next(d for d in out.dead if "NaN" in d.reason).payload)["fill_level_ml"] == "NaN"

    whole = {
        "undecodable": (subject(), b"\x00\x01garbage"),
        "unknown line": (subject(line="L-999-1"), encode_binary("L-999-1", SKU, *readings(1, 2)[0:4], 0)),
        "wrong subject": (subject(line="L-002-1", plant="P-002"), binary(200, 3)),
        "unknown sku": (subject(), encode_binary(LINE, "MYSTERY-BREW", *readings(300, 2)[0:4], 0)),
        "truncated": (subject(), binary(400, 3)[:-5]),
    }
    for seq_no, (name, (subj, payload)) in enumerate(whole.items(), start=2):
        out = p.process(subj, payload, seq_no, T0 + 2000)
        assert len(out.dead) == 1 and out.scored == 0, name
        assert out.dead[0].payload == payload
    assert p.counters["messages"] == 6
    # JSON lines: a broken line is dead-lettered alone
    payload = encode_jsonl(LINE, SKU, *readings(500, 4)).split(b"\n")
    payload[2] = b'{"line_id": "L-001-1", "plc_seq": 502, "sku"'
    out = p.process(subject(), b"\n".join(payload), 10, T0 + 3000)
    assert out.scored == 3
    assert [d.reason for d in out.dead] == ["invalid JSON: Expecting ':' delimiter"]
    assert out.dead[0].payload == payload[2]


def test_a_redelivery_or_a_copy_changes_nothing() -> None:
    p = processor()
    first = p.process(subject(), binary(1, 100, fill=SPEC.hi[0] + 1), 7, T0 + 1000)
    assert first.scored == 100 and [a["detector"] for a in first.alerts if a["event"] == "open"]
    before = p.snapshot()
    again = p.process(subject(), binary(1, 100, fill=SPEC.hi[0] + 1), 7, T0 + 1000)  # the same message
    assert again.skipped and not again.alerts and not again.dead
    assert p.snapshot() == before
    # the same readings in a new message (a retry after the duplicate window): copies, not rescored
    copy = p.process(subject(), binary(1, 100, fill=SPEC.hi[0] + 1), 8, T0 + 1000)
    assert copy.scored == 0 and not copy.alerts
    after = json.loads(zlib.decompress(p.snapshot()))
    assert after["lanes"] == json.loads(zlib.decompress(before))["lanes"]
    assert after["counters"]["copies"] == 100


def test_only_live_readings_page_late_and_backfill_ones_are_historical() -> None:
    p = processor()
    arrival = T0 + 60_000
    p.process(subject(), binary(1, 100, t0=arrival - 1000), 1, arrival)  # the line's watermark: now
    out_of_spec = SPEC.hi[0] + 2
    late = p.process(subject(), binary(101, 50, t0=arrival - 600_000, fill=out_of_spec), 2, arrival)
    backfill = p.process(
        subject("backfill"), binary(151, 50, t0=arrival - 7_200_000, fill=out_of_spec), 3, arrival
    )
    live = p.process(subject(), binary(201, 50, t0=arrival, fill=out_of_spec), 4, arrival + 600)
    for out, lane in ((late, "late"), (backfill, "backfill")):
        opened = [a for a in out.alerts if a["event"] == "open"]
        assert opened and {(a["lane"], a["paged"]) for a in opened} == {(lane, False)}
    opened = [a for a in live.alerts if a["event"] == "open"]
    assert opened and {(a["lane"], a["paged"]) for a in opened} == {("live", True)}
    assert p.counters["late"] == 50


def test_a_restart_from_a_checkpoint_gives_the_same_alerts() -> None:
    payloads = []
    for k in range(40):  # a line drifting high, then back
        seq, event, verdict, sensors = readings(1 + 50 * k, 50, t0=T0 + 500 * k)
        sensors[0] += min(k, 25) * 0.15 if k < 30 else 0
        payloads.append(encode_binary(LINE, SKU, seq, event, verdict, sensors, 0))

    def alert_ids(p: PartitionProcessor, start: int) -> list[str]:
        ids = []
        for k in range(start, 40):
            out = p.process(subject(), payloads[k], k + 1, T0 + 500 * k + 600)
            ids += [f"{a['alert_id']}/{a['event']}" for a in out.alerts]
        return ids

    whole = alert_ids(processor(), 0)
    assert any("drift_cusum" in i for i in whole)
    first = processor()
    before = []
    for k in range(17):
        out = first.process(subject(), payloads[k], k + 1, T0 + 500 * k + 600)
        before += [f"{a['alert_id']}/{a['event']}" for a in out.alerts]
    restarted = processor()
    restarted.restore(first.snapshot())
    assert before + alert_ids(restarted, 17) == whole


def test_the_live_path_scores_each_reading_once_in_order_whichever_path_brings_it() -> None:
    """A line's messages come on the live path (core NATS copies) and on the stored one in any
    order: a message ahead of one not yet seen waits for it, what one path scored the other
    takes for a copy, and state and alerts equal those of the stored path alone."""
    t0 = int(time.time() * 1000) - 5_000  # now: the live path's arrival is its own clock
    messages = []
    for i in range(6):
        seq, event, verdict, sensors = readings(1_000 + 10 * i, 10, t0=t0 + 100 * i)
        if i in (2, 5):
            sensors[0, 3] = 9999.9  # a spike: alerts open
        messages.append(encode_binary(LINE, SKU, seq, event, verdict, sensors, sent_ms=t0 + 100 * i + 99))

    def state(p: PartitionProcessor) -> dict:  # (but an alert's latency: from its own path)
        lanes = json.loads(zlib.decompress(p.snapshot()))["lanes"]
        for lane in lanes.values():
            for record in lane["open"].values():
                record.pop("latency_ms")
        return lanes

    def stored(p: PartitionProcessor, i: int):
        return p.process(subject(), messages[i], i + 1, t0 + 100 * i + 150)

    alone = processor()
    expected = [a["alert_id"] + a["event"] for i in range(6) for a in stored(alone, i).alerts]
    assert expected

    p, stats = processor(), Stats()
    feed = LiveFeed(p, stats)
    got = [a["alert_id"] + a["event"] for a in stored(p, 0).alerts]  # a line's first: stored path
    live = partial(feed.offer, subject(LIVE_LANE))
    live(messages[2])  # ahead of message 1: waits
    assert feed.n_waiting == 1 and stats.live_readings == 0
    live(messages[1])  # continues the line: scored, and message 2 after it
    assert feed.n_waiting == 0 and stats.live_readings == 20
    live(messages[1])  # a copy (the other listener's)
    live(messages[1], f"{LINE}:1010:10")  # known for one by its id, without decoding it
    for i in (1, 2):  # the stored copies come: nothing more is scored
        out = stored(p, i)
        assert out.scored == 0 and not out.alerts
    live(messages[4])  # ahead of message 3, which the stored path brings first
    out = stored(p, 3)
    assert out.scored == 10
    got += [a["alert_id"] + a["event"] for a in out.alerts]
    feed.drain()
    live(messages[5])
    assert stored(p, 4).scored == 0 and stored(p, 5).scored == 0
    got += [a["alert_id"] + a["event"] for o in feed.take() for a in o.alerts]
    assert sorted(got) == sorted(expected)
    assert stats.live_readings == 40 and feed.dropped == 0
    assert state(p) == state(alone)  # the same detector state, the same open alerts
    # a checkpoint keeps what either path had: after a restart, stored copies are copies
    again = processor()
    again.restore(p.snapshot())
    assert again.consumed == {LINE: 1_059}
    assert again.process(subject(), messages[5], 7, t0 + 1000).scored == 0
