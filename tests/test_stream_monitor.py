"""The operators' path on a real NATS: alerts in seconds, garbage dead-lettered, crashes survived."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dayclose.settings import resolve_target
from dayclose.stream.alerts import AlertTable
from dayclose.stream.consumers import Puller, align, position, stored_ms
from dayclose.stream.detectors import Reference
from dayclose.stream.gateway import build_scenario, simulate
from dayclose.stream.monitor import Stats, Unit, publish_outputs
from dayclose.stream.partition import PartitionProcessor, progress
from dayclose.stream.session import run_session
from dayclose.stream.streams import connect, probe_partitions
from dayclose.stream.wire import encode_binary
from tests.stream_fixtures import (
    checkpoints,
    duckdb_target,
    env_for,
    read_truth,
    start_dayclose,
    stream_messages,
    stream_server,
)

pytestmark = pytest.mark.serial  # asserts a latency budget: scripts/test runs it alone

BUDGET_S = 5.0  # the operators' budget: a drifting line flagged within seconds of going out of spec
FROM_READING_S = 2.0  # from the reading's own timestamp, gateway batching included


def wall_ms(text: str | object) -> float:
    from datetime import UTC, datetime

    value = text if isinstance(text, datetime) else datetime.fromisoformat(str(text).rstrip("Z"))
    return value.replace(tzinfo=UTC).timestamp() * 1000


@pytest.fixture(scope="module")
def live_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """4 plants, 800 readings/s for 14 s, every fault injected, one monitor worker in process."""
    tmp = tmp_path_factory.mktemp("live")
    with pytest.MonkeyPatch.context() as mp, stream_server(tmp / "nats") as s:
        mp.setenv("DAYCLOSE_DUCKDB", str(tmp / "warehouse.duckdb"))
        scenario = build_scenario(plants=4, rate=800, duration_s=14, seed=3, backlog_hours=0.5)
        session = asyncio.run(run_session(s, scenario, tmp / "sim", None, "duckdb"))
        yield {
            "settings": s,
            "truth": read_truth(tmp / "sim"),
            "alerts": AlertTable(resolve_target("duckdb")).read(),
            "stats": session.monitor,
            "dead": stream_messages(s, "dead"),
            "checkpoints": checkpoints(s),
        }


def test_drift_alert_within_the_budget_of_its_first_out_of_spec_reading(live_run: dict) -> None:
    run = live_run["truth"]["run"]
    first = run["drift_first_out_of_spec"]
    assert first is not None, "the drift never left the spec: the scenario is broken"
    drift = [
        a
        for a in live_run["alerts"]
        if a["line_id"] == run["drift_line"]
        and a["paged"]
        and (a["detector"] in ("drift_cusum", "drift_ewma") or a["sensor"] == "fill_level_ml")
    ]
    assert drift, "the drifting line raised no live alert"
    caught = min(drift, key=lambda a: a["raised_at"])
    lead_s = (first["published_wall_ms"] - wall_ms(caught["raised_at"])) / 1000
    assert lead_s > -BUDGET_S, f"alert {-lead_s:.1f} s after the first out-of-spec reading"
    assert caught["reading_to_alert_ms"] <= FROM_READING_S * 1000
    drift_start = next(i for i in live_run["truth"]["injections"] if i["kind"] == "drift")["at"]
    assert wall_ms(caught["opened_at"]) >= wall_ms(drift_start), "an alarm before the drift began"
    # no other line drifted: no live drift alarm anywhere else
    others = {a["line_id"] for a in live_run["alerts"] if a["paged"] and a["detector"].startswith("drift_")}
    assert others == {run["drift_line"]}


def test_stuck_sensor_and_spikes_flagged_garbage_dead_lettered_worker_alive(live_run: dict) -> None:
    truth, alerts = live_run["truth"], live_run["alerts"]
    live = [a for a in alerts if a["paged"]]
    stuck = [a for a in live if a["detector"] == "stuck"]
    assert [(a["line_id"], a["sensor"]) for a in stuck] == [(truth["run"]["stuck_line"], "temperature_c")]
    for spike in (i for i in truth["injections"] if i["kind"] == "spike"):
        value = float(spike["detail"].split()[-1])
        assert any(
            a["line_id"] == spike["line_id"]
            and a["detector"] == "out_of_spec"
            and a["opened_value"] == pytest.approx(value)
            for a in live
        ), spike
    # one alert per episode, each closed once the line is clean again
    assert len({a["alert_id"] for a in alerts}) == len(alerts)
    assert all(a["closed_at"] is not None for a in alerts if a["detector"] in ("stuck", "rate_of_change"))
    # garbage: every garbage message dead-lettered, with its reason
    reasons = [m.headers["Dayclose-Reason"] for m in live_run["dead"]]
    assert len(reasons) == truth["run"]["garbage_messages"]
    assert sum("NaN" in r for r in reasons) == 53  # three NaN copies and the burst of 50
    assert sum(r.startswith("undecodable payload") for r in reasons) == 2
    assert sum(r.endswith("h after the reading reached the server") for r in reasons) == 2
    burst = next(i for i in truth["injections"] if i["kind"] == "burst")
    rate = [a for a in live if a["detector"] == "dead_letter_rate"]
    assert [a["plant_id"] for a in rate] == [burst["plant_id"]]
    # and the worker kept scoring: every reading published, after the garbage too
    assert live_run["stats"].readings == truth["run"]["readings"]
    scored = progress(list(live_run["checkpoints"].values()))
    for (line, lane), (n, _first, last) in truth["lines"].items():
        assert (scored[f"{line}|{lane}"]["scored"], scored[f"{line}|{lane}"]["hwm"]) == (n, last), (
            line,
            lane,
        )


def reference_alerts(s, telemetry: list) -> set[str]:
    """The alerts an uninterrupted monitor gives: every stored message, in order, per unit."""
    units: dict[tuple[str, int], PartitionProcessor] = {}
    reference = Reference.from_seeds()
    out = set()
    for msg in telemetry:
        lane, k, _, _ = s.parse_stored(msg.subject)
        unit = units.setdefault((lane, k), PartitionProcessor(s, reference))
        result = unit.process(msg.subject, msg.data, msg.metadata.sequence.stream, stored_ms(msg))
        out |= {f"{a['alert_id']}/{a['event']}" for a in result.alerts}
    return out


def test_monitor_killed_and_restarted_scores_every_reading_with_no_duplicate_alert(
    nats, tmp_path: Path
) -> None:
    env = env_for(nats, tmp_path)
    log = tmp_path / "monitor.log"
    scenario = build_scenario(plants=3, rate=600, duration_s=16, seed=5, backlog_hours=0.25)
    done = threading.Event()

    def publish() -> None:
        try:
            asyncio.run(simulate(nats, scenario, tmp_path / "sim"))
        finally:
            done.set()

    monitor = start_dayclose(["monitor"], env, log)
    publisher = threading.Thread(target=publish)
    publisher.start()
    started = time.monotonic()
    try:
        for at in (3.0, 6.5, 10.0, 14.5):  # SIGKILL while readings flow, restart at once
            time.sleep(max(0.0, at - (time.monotonic() - started)))
            os.kill(monitor.pid, signal.SIGKILL)
            monitor.wait()
            restarted_at = log.stat().st_size
            monitor = start_dayclose(["monitor"], env, log)
        publisher.join(60)
        assert done.is_set()
        # stopped once it has opened its consumers (its SIGTERM handler is in place by then: a
        # SIGTERM while it still imports ends it by the signal, exit -15)
        deadline = time.monotonic() + 60
        while b"consumers (" not in log.read_bytes()[restarted_at:] and time.monotonic() < deadline:
            time.sleep(0.1)
        monitor.send_signal(signal.SIGTERM)
        assert monitor.wait(30) == 0
        final = start_dayclose(["monitor", "--idle-exit", "3"], env, log)
        assert final.wait(60) == 0
    finally:
        for proc in (monitor,):
            if proc.poll() is None:
                proc.kill()
        publisher.join(5)
    text = log.read_text()
    assert "reset" in text, "no kill ever left work unacknowledged: the test did not test a crash"
    truth = read_truth(tmp_path / "sim")
    # every published reading scored (at least once: the checkpoints count distinct readings)
    scored = progress(list(checkpoints(nats).values()))
    for (line, lane), (n, _first, last) in truth["lines"].items():
        assert (scored[f"{line}|{lane}"]["scored"], scored[f"{line}|{lane}"]["hwm"]) == (n, last), (
            line,
            lane,
        )
    # the alerts are exactly those of an uninterrupted run, each stored once
    stored = [json.loads(m.data) for m in stream_messages(nats, "alerts")]
    line_alerts = [f"{a['alert_id']}/{a['event']}" for a in stored if a["detector"] != "dead_letter_rate"]
    assert len(line_alerts) == len(set(line_alerts))
    want = reference_alerts(nats, stream_messages(nats, "telemetry"))
    assert want and set(line_alerts) == want
    rows = AlertTable(duckdb_target(Path(env["DAYCLOSE_DUCKDB"]))).read("detector <> 'dead_letter_rate'")
    assert sorted(r["alert_id"] for r in rows) == sorted(
        i.rsplit("/", 1)[0] for i in want if i.endswith("/open")
    )
    # each paged (live) alert was a line on the monitor's stderr as it opened
    paged = [r for r in rows if r["paged"]]
    assert paged, "no live alert: the scenario pages nothing"
    for r in paged:
        assert f"ALERT {r['plant_id']}/{r['line_id']} {r['detector']} {r['sensor']}" in text, r
    # and `dayclose alerts` lists the recent ones from line_alerts
    listed = subprocess.run(
        [sys.executable, "-m", "dayclose.cli", "alerts", "--last", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    out = listed.stdout.splitlines()
    assert [line.startswith("ALERT ") for line in out] == [True, True, True, False], out
    table = AlertTable(duckdb_target(Path(env["DAYCLOSE_DUCKDB"])))
    assert out[-1].startswith(f"3 of {len(table.read())} alerts in {table.relation}"), out


def test_a_redelivered_message_changes_nothing(nats) -> None:
    line, plant, sku = "L-001-1", "P-001", "PILS-330-BTL"
    reference = Reference.from_seeds()
    spec = reference.specs[sku]

    async def scenario() -> None:
        nc = await connect(nats, "test")
        js = nc.jetstream()
        now = int(time.time() * 1000)
        for k in range(5):  # out of spec from the third message on: alerts to be raised
            seq = np.arange(100 * k, 100 * k + 100)
            sensors = np.tile(((spec.lo + spec.hi) / 2)[:, None], (1, 100)) + np.linspace(0, 0.01, 100)
            sensors[0] += 0 if k < 2 else 6
            payload = encode_binary(
                line, sku, seq, now - 5000 + seq * 5, np.ones(100, dtype=np.uint8), sensors, now
            )
            await js.publish(nats.ingress_subject("live", plant, line), payload)
        kv = await js.key_value(nats.state_bucket)
        k = (await probe_partitions(nc, nats, [line]))[line]
        unit = Unit(
            nats,
            f"monitor-live-{k:03d}",
            nats.telemetry_stream,
            nats.stored_filter("live", k),
            PartitionProcessor(nats, reference),
            256,
        )
        await unit.open(nc, js, kv)
        stats = Stats()
        first = []
        while len(first) < 5:  # what has arrived: one fetch or several
            first += await unit.sub.fetch(5 - len(first), timeout=5)
        outs = [unit._process(m, *position(m)) for m in first]
        assert sum(o.scored for o in outs) == 500 and any(o.alerts for o in outs)
        await publish_outputs(js, nats, outs, stats)
        await kv.put(unit.key, unit.processor.snapshot())
        before = unit.processor.snapshot()
        for m in first:  # the worker lost track before acknowledging: the server delivers again
            await m.nak()
        again = []
        while len(again) < 5:  # the server hands them back, one fetch or several
            again += await unit.sub.fetch(5 - len(again), timeout=5)
        assert [m.metadata.num_delivered for m in again] == [2] * 5
        outs = [unit._process(m, *position(m)) for m in again]
        assert all(o.skipped and not o.alerts and not o.dead for o in outs)
        assert unit.processor.snapshot() == before
        for m in again:
            await m.ack()
        info = await js.stream_info(nats.alerts_stream)
        assert info.state.messages == stats.alerts
        await nc.close()

    asyncio.run(scenario())


def test_the_bulk_puller_hands_over_every_message_once_and_in_order(nats) -> None:
    """The monitor's fetch (one open pull request, messages collected by a callback): every
    stored message once, in stream order, across fetches of any size; an empty consumer
    returns nothing after the wait; unacknowledged messages come back after a restart."""

    async def scenario() -> None:
        nc = await connect(nats, "test")
        js = nc.jetstream()
        subject = nats.ingress_subject("live", "P-001", "L-001-1")
        for i in range(1000):
            await js.publish(subject, i.to_bytes(4, "little"))
        name = "puller-test"
        await align(js, nats.telemetry_stream, name, f"{nats.prefix}.tele.>", None)
        puller = await Puller(nc, nats.telemetry_stream, name).start()
        got: list[int] = []
        while len(got) < 1000:
            msgs = await puller.fetch(97, timeout=2)
            assert msgs and len(msgs) <= 2 * 97
            got += [int.from_bytes(m.data, "little") for m in msgs]
            # half acknowledged (the first always: a fetch may return one message), the rest pending
            for m in msgs[: (len(msgs) + 1) // 2]:
                await m.ack()
        assert got == list(range(1000))
        started = time.monotonic()
        assert await puller.fetch(50, timeout=0.5) == []
        assert 0.4 < time.monotonic() - started < 2.0
        await puller.stop()
        # a new owner resets the consumer to its ack floor: what was not acknowledged returns
        assert await align(js, nats.telemetry_stream, name, f"{nats.prefix}.tele.>", None) == "reset"
        puller = await Puller(nc, nats.telemetry_stream, name).start()
        again: list = []
        while True:
            msgs = await puller.fetch(500, timeout=1)
            if not msgs:
                break
            again += msgs
        first_unacked = min(int.from_bytes(m.data, "little") for m in again)
        assert first_unacked > 0 and [int.from_bytes(m.data, "little") for m in again] == list(
            range(first_unacked, 1000)
        )
        await nc.close()

    asyncio.run(scenario())
