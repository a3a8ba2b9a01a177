"""A 3-node JetStream cluster loses a node twice (kill -9) while plants publish: first a node the
gateways are not connected to (the telemetry stream's leader when it is one of those, else one
the monitor's live path listens on), then the node they are connected to. Nothing is lost,
nothing is stored twice, every reading is scored once, alerts keep flowing, p99 publish ->
alert stays under 2 s in every phase, and each node rejoins and catches up.

Each loss has three phases, measured separately (wall clock):

- failover: from the kill until every stream and consumer has a leader again. nats-server's
  Raft lets a follower campaign only after 4 to 9 s without its leader's heartbeat (fixed in
  the server): a consumer whose leader died delivers nothing meanwhile, and a stream whose
  leader died stores nothing (the gateways re-send what it refused: it is stored then, once).
  Alerts come from the live path meanwhile (the gateways' core NATS copies, live.py), which
  no election holds up;
- degraded: two nodes of three carry on until the lost one is back;
- rejoin: from the restart until the node reports every replica it holds current.

Publish -> alert is from the gateway's first publish of a message (its sent_ms) to its readings
scored and its alerts paged, by whichever path came first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from nats.js.errors import NotFoundError

from dayclose.stream.config import StreamSettings
from dayclose.stream.failover import retrying
from dayclose.stream.gateway import Plants, build_scenario
from dayclose.stream.monitor import Stats
from dayclose.stream.server import NodeLoss, PrivateCluster
from dayclose.stream.session import past_night, run_session
from dayclose.stream.streams import connect
from tests.stream_fixtures import read_truth, stream_cluster, stream_messages

pytestmark = pytest.mark.serial  # asserts a latency budget: scripts/test runs it alone

DURATION_S = 50
BEFORE_S = 4.0  # from the monitor's first acknowledgement to the first kill
DOWN_S = 12.0  # longer than an election (at most 9 s), so that a degraded phase follows it
BETWEEN_S = 3.0  # from the first node caught up to the second kill
AFTER_S = 5.0  # at least this much publishing after the second node caught up
ELECTION_S = 30.0  # deadline for the leaders to be back: an election or two
CATCH_UP_S = 60.0
BUDGET_MS = 2000.0  # p99 publish -> alert, in every phase (issue 40)
SENSORS = ("fill_level_ml", "capper_torque_nm", "temperature_c")


@dataclass
class Loss:
    whose: str  # "other": a node the gateways were not connected to; "gateways": theirs
    led_telemetry: bool  # it was the telemetry stream's leader when killed
    listened: bool  # the monitor's live path listened on it when it was killed
    times: NodeLoss


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def publish_to_alert_ms(stats: Stats, since: float, until: float) -> list[float]:
    """Arrival in the stream -> scored with its alerts stored (ms), of the live messages that
    arrived in [since, until] (wall clock)."""
    return [
        ms for t, ms in zip(stats.latency_at, stats.latency_ms, strict=True) if since <= t - ms / 1000 < until
    ]


def node_states(cluster: PrivateCluster) -> dict[str, dict[str, tuple[int, int]]]:
    """Each node's own copy of each stream: (messages, last sequence), from its /jsz."""
    out = {}
    for node in cluster.nodes:
        doc = node.monitoring("/jsz?streams=true") or {}
        out[node.name] = {
            st["name"]: (st["state"]["messages"], st["state"]["last_seq"])
            for account in doc.get("account_details", [])
            for st in account.get("stream_detail", [])
        }
    return out


def landed(landing: Path) -> list[dict]:
    return [
        json.loads(text)
        for part in sorted((landing / "units").glob("arrived=*/part-*.jsonl"))
        for text in part.read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """3 plants (6 lines, 300 readings/s, a spike a second, a 3-minute backlog replayed at +4 s)
    for 50 s on a 3-node cluster with R3 streams; a monitor worker and the archiver run beside
    them (one connection each, to whichever node); two nodes are killed with SIGKILL in turn,
    each restarted on its store 12 s later."""
    tmp = tmp_path_factory.mktemp("cluster")
    offset, day = past_night(seconds_before_2am=DURATION_S + 4)
    losses: list[Loss] = []
    ready: list[float] = []
    with (
        pytest.MonkeyPatch.context() as mp,
        stream_cluster(tmp / "nats", clock_offset_s=offset) as (cluster, s),
    ):
        mp.setenv("DAYCLOSE_DUCKDB", str(tmp / "warehouse.duckdb"))
        scenario = build_scenario(
            plants=3,
            rate=300,
            duration_s=DURATION_S,
            seed=5,
            backlog_hours=0.05,
            reconnect_after_s=4,
            clock_offset_s=offset,
            extra_spikes=DURATION_S,
        )
        names = [node.name for node in cluster.nodes]

        async def gateways_node(plants: Plants) -> int:
            deadline = time.monotonic() + 30
            while plants.nc is None or not plants.nc.is_connected or plants.nc.connected_url is None:
                assert time.monotonic() < deadline, "the gateways are not connected"
                await asyncio.sleep(0.05)
            return cluster.node_of(plants.nc.connected_url.geturl())

        async def monitor_ready(plants: Plants) -> float:
            """When the monitor has acknowledged a live message: it has opened its consumers."""
            js = plants.nc.jetstream()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for k in range(s.partitions):
                    with contextlib.suppress(NotFoundError):
                        name = f"monitor-live-{k:03d}"
                        info = await retrying(
                            lambda js=js, name=name: js.consumer_info(s.telemetry_stream, name)
                        )
                        if info.ack_floor and info.ack_floor.stream_seq:
                            return time.time()
                await asyncio.sleep(0.2)
            raise AssertionError("the monitor acknowledged nothing within 60 s")

        async def kill_nodes(plants: Plants, monitor: Stats) -> None:
            await gateways_node(plants)
            ready.append(await monitor_ready(plants))
            at = ready[0] + BEFORE_S
            for whose in ("other", "gateways"):
                await asyncio.sleep(max(0.0, at - time.time()))
                theirs = await gateways_node(plants)
                js = plants.nc.jetstream()
                info = await retrying(lambda js=js: js.stream_info(s.telemetry_stream))
                leader = names.index(info.cluster.leader)
                listened = {cluster.node_of(netloc) for netloc in monitor.live_nodes if netloc}
                if whose == "gateways":
                    victim = theirs
                else:  # the telemetry stream's leader when the gateways are elsewhere (the harder
                    # case for the stored path), else a node the live path listens on (for it)
                    others = [i for i in range(3) if i != theirs]
                    victim = max(others, key=lambda i: (i == leader, i in listened))
                times = await cluster.lose(victim, DOWN_S, ELECTION_S, CATCH_UP_S)
                losses.append(Loss(whose, victim == leader, victim in listened, times))
                at = times.caught_up + BETWEEN_S

        session = asyncio.run(
            run_session(s, scenario, tmp / "sim", tmp / "landing", "duckdb", alongside=kill_nodes)
        )
        ended = session.started_wall + DURATION_S  # the plants' last publish
        # with nothing published any more, every node's copy of every stream is the same
        deadline = time.monotonic() + CATCH_UP_S
        while len({json.dumps(v, sort_keys=True) for v in node_states(cluster).values()}) > 1:
            assert time.monotonic() < deadline, node_states(cluster)
            time.sleep(0.2)
        alerts = [json.loads(m.data) for m in stream_messages(s, "alerts")]
        stored = len(stream_messages(s, "telemetry"))
        replicas = asyncio.run(telemetry_replicas(s))
        yield {
            "session": session,
            "truth": read_truth(tmp / "sim"),
            "losses": losses,
            "ended": ended,
            "states": node_states(cluster),
            "alerts": alerts,
            "stored": stored,
            "replicas": replicas,
            "ready": ready[0],
            "landing": landed(tmp / "landing"),
            "offset": offset,
            "settings": s,
        }


async def telemetry_replicas(s: StreamSettings) -> list[tuple[str, bool]]:
    """The telemetry stream's leader and followers as its leader reports them: (name, current)."""
    nc = await connect(s, "test-cluster-info")
    try:
        info = await retrying(lambda: nc.jetstream().stream_info(s.telemetry_stream))
        return [(info.cluster.leader, True)] + [(r.name, bool(r.current)) for r in info.cluster.replicas]
    finally:
        await nc.close()


def phases(outage: dict) -> dict[str, tuple[float, float]]:
    """(since, until), wall clock: before the first loss (from the monitor's first
    acknowledgement), each loss's failover, degraded and rejoin phases, and after the last."""
    losses = [loss.times for loss in outage["losses"]]
    out = {"before": (outage["ready"], losses[0].killed)}
    for i, loss in enumerate(losses, start=1):
        out.update({f"loss {i} {name}": span for name, span in loss.phases().items()})
    out["after"] = (losses[-1].caught_up, outage["ended"])
    return out


def paged_in(outage: dict, since: float, until: float) -> list[dict]:
    """The paged alerts opened in [since, until] (wall clock)."""
    out = []
    for alert in outage["alerts"]:
        raised = datetime.fromisoformat(alert["raised_at"].rstrip("Z")).replace(tzinfo=UTC).timestamp()
        if alert["event"] == "open" and alert["paged"] and since <= raised - outage["offset"] < until:
            out.append(alert)
    return out


def test_a_node_apart_from_the_gateways_then_theirs_was_lost_and_each_caught_up(outage: dict) -> None:
    losses = outage["losses"]
    assert [loss.whose for loss in losses] == ["other", "gateways"]
    # whichever node the gateways were on, the telemetry stream lost its leader once at least,
    # and the live path one of the two nodes it listens on
    assert any(loss.led_telemetry for loss in losses)
    assert any(loss.listened for loss in losses)
    for loss in losses:
        t = loss.times
        assert t.killed < t.leaders_back < t.restarted < t.caught_up
    assert outage["ended"] - losses[-1].times.caught_up >= AFTER_S, (
        "the machine was too slow for the schedule"
    )
    # the leader reports every follower current
    assert sorted(name for name, _ in outage["replicas"]) == sorted(outage["states"])
    assert all(current for _, current in outage["replicas"])
    # every node holds every stream (3 and the checkpoints' bucket), the same messages
    states = outage["states"]
    assert len(states) == 3 and all(len(streams) == 4 for streams in states.values())
    assert len({json.dumps(v, sort_keys=True) for v in states.values()}) == 1


def test_every_reading_was_stored_once_and_landed_once_after_dedup(outage: dict) -> None:
    truth, lines = outage["truth"], outage["landing"]
    run = truth["run"]
    injected_retries = sum(1 for i in truth["injections"] if i["kind"] == "retry")
    assert run["resent"] > 0, "no publish had to be sent again: the loss did not touch the gateways"
    # every message stored once: the re-sent copies and the injected retries were duplicates
    assert outage["stored"] == run["messages"] - injected_retries
    expected = {
        (line, seq)
        for (line, _lane), (_n, first, last) in truth["lines"].items()
        for seq in range(first, last + 1)
    }
    assert len(expected) == run["readings"]
    readings = [d for d in lines if isinstance(d.get("plc_seq"), int) and d.get("sku") is not None]
    real = [
        d
        for d in readings
        if all(isinstance(d[f], float | int) for f in SENSORS) and d["event_at"] <= d["received_at"]
    ]
    garbage = len(lines) - len(real)
    # no reading lost, none stored twice: one arrival (received_at) per reading
    assert {(d["line_id"], d["plc_seq"]) for d in real} == expected
    assert len({(d["line_id"], d["plc_seq"], d["received_at"]) for d in real}) == len(expected)
    # the garbage beside them landed too (the nightly job dead-letters it)
    assert garbage >= run["garbage_messages"]
    # good units per production day and SKU, counted once, equal the truth
    good: dict[tuple[str, str], int] = {}
    for d in {(d["line_id"], d["plc_seq"]): d for d in real}.values():
        if d["verdict"] == "good":
            key = (d["event_at"][:10], d["sku"])
            good[key] = good.get(key, 0) + 1
    assert good == truth["good"]


def test_the_monitor_scored_every_reading_once_and_alerts_kept_flowing(outage: dict) -> None:
    stats, truth = outage["session"].monitor, outage["truth"]
    # once: the readings scored on either path add up to the readings published
    assert stats.readings == truth["run"]["readings"]
    assert 0 < stats.live_readings < stats.readings  # (the backlog and each line's first: stored path)
    # no alert raised twice: every alert event the monitor published is a distinct stored one
    assert (
        stats.alerts == len({(a["alert_id"], a["event"]) for a in outage["alerts"]}) == len(outage["alerts"])
    )
    # the gateways' copies lost with their node were sent again once they reconnected
    assert truth["run"]["live_resent"] > 0
    spans = {name: span for name, span in phases(outage).items() if "loss" not in name}
    for i, loss in enumerate(outage["losses"], start=1):
        spans[f"loss {i}"] = (loss.times.killed, loss.times.restarted)
        # (a failover that took the telemetry stream's leader stores nothing until it ends)
        spans[f"loss {i} degraded"] = (loss.times.leaders_back, loss.times.restarted)
    for name, (since, until) in spans.items():
        assert paged_in(outage, since, until), f"no alert paged during {name}"


def test_publish_to_alert_p99_within_2_s_in_every_phase_failovers_included(outage: dict) -> None:
    stats = outage["session"].monitor
    figures = {}
    for name, (since, until) in phases(outage).items():
        latency = publish_to_alert_ms(stats, since, until)
        alerts = [a["latency_ms"] for a in paged_in(outage, since, until)]
        figures[name] = {
            "seconds": round(until - since, 1),
            "messages": len(latency),
            "p99_ms": round(p99(latency)) if latency else None,
            "alerts": len(alerts),
            "alerts_max_ms": round(max(alerts)) if alerts else None,
        }
    losses = [
        {"whose": loss.whose, "led_telemetry": loss.led_telemetry, "listened": loss.listened}
        for loss in outage["losses"]
    ]
    print(json.dumps({"losses": losses, "phases": figures}, indent=1))  # docs/streaming.md (pytest -s)
    for name, f in figures.items():
        assert f["messages"] and f["p99_ms"] < BUDGET_MS, (name, f)
