"""The operators' side of incident 003 in under a minute (called at the end of `dayclose demo`).

Eight breweries stream unit readings into NATS JetStream for 18 seconds while one monitor
worker and the archiver consume them, on a plants' clock that replays yesterday 01:59:38 UTC:
a line drifts out of spec, a sensor sticks, garbage arrives, and a plant that has been offline
since 21:59 the day before reconnects and replays its 4-hour backlog. Then the nightly units job
runs on what the archiver landed and its count is compared with the simulator's truth.

It uses the NATS at NATS_URL when that server answers and partitions the demo's subjects
(prefix dayclose_demo), and otherwise a private nats-server of its own; a warehouse of its own
(a DuckDB file under the demo folder, or the Postgres schema dayclose_stream_demo).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nats.js.errors import NotFoundError

from dayclose.jobs import run_nightly
from dayclose.settings import resolve_target
from dayclose.stream.alerts import AlertTable
from dayclose.stream.config import StreamSettings, settings
from dayclose.stream.detectors import Reference
from dayclose.stream.gateway import build_scenario
from dayclose.stream.server import PrivateServer
from dayclose.stream.session import Session, past_night, run_session
from dayclose.stream.streams import connect, has_mapping, setup
from dayclose.warehouse import Warehouse, fresh_warehouse

PREFIX = "dayclose_demo"
PLANTS, RATE, SECONDS, BACKLOG_HOURS, RECONNECT_S = 8, 200, 18.0, 4.0, 5.0
SEED = 0


async def _fresh_streams(s: StreamSettings) -> None:
    """The demo's streams, emptied: they live under the demo's own prefix."""
    nc = await connect(s, "dayclose-demo")
    try:
        js = nc.jetstream()
        for name in (s.telemetry_stream, s.alerts_stream, s.dead_stream, f"KV_{s.state_bucket}"):
            with contextlib.suppress(NotFoundError):  # absent: nothing to empty
                await js.delete_stream(name)
    finally:
        await nc.close()


def _at(text: object, start_ms: int) -> float:
    value = text if isinstance(text, datetime) else datetime.fromisoformat(str(text).rstrip("Z"))
    return value.replace(tzinfo=UTC).timestamp() - start_ms / 1000


def operators_story(workdir: Path, target_name: str | None) -> int:
    folder = workdir / "stream"
    shutil.rmtree(folder / "landing", ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    fresh_warehouse(
        target_name, folder / "dayclose-stream.duckdb", "dayclose_stream_demo", ("dayclose_stream_demo_ops",)
    )
    offset, day = past_night(seconds_before_2am=22)  # yesterday 01:59:38 UTC
    base = settings(prefix=PREFIX, clock_offset_s=offset)
    lines = sorted(Reference.from_seeds().plant_of_line)
    server = None
    if not asyncio.run(has_mapping(base, lines)):
        server = PrivateServer(base).start()
        where = f"a private nats-server {server.version()} on port {server.port}"
        base = settings(url=server.url, prefix=PREFIX, clock_offset_s=offset)
    else:
        where = f"nats-server at {base.url}"
    try:
        asyncio.run(_fresh_streams(base))
        asyncio.run(setup(base, lines))
        scenario = build_scenario(
            PLANTS, RATE, SECONDS, SEED, "binary", BACKLOG_HOURS, RECONNECT_S, clock_offset_s=offset
        )
        replayed = day + timedelta(hours=2, seconds=-22)
        print(
            f"\nOperators: {PLANTS} breweries ({len(scenario.lines)} lines) stream {RATE} unit readings "
            f"a second for {SECONDS:.0f} s\ninto NATS JetStream ({where}, K={base.partitions} partitions), "
            f"replaying {replayed:%a %Y-%m-%d %H:%M:%S} UTC.\n{scenario.offline_plant} has been offline for "
            f"{BACKLOG_HOURS:.0f} h and reconnects at +{RECONNECT_S:.0f} s. Live alerts, paged:"
        )
        session = asyncio.run(run_session(base, scenario, folder / "sim", folder / "landing", target_name))
    finally:
        if server is not None:
            server.stop()
    _print_operators(session, AlertTable(resolve_target(target_name)).read())
    return _print_finance(session, folder / "landing", target_name, day)


def _print_operators(session: Session, alerts: list[dict]) -> None:
    sc, plants, stats = session.plants.sc, session.plants, session.monitor
    live = [a for a in alerts if a["paged"]]

    def at(alert: dict) -> str:
        return f"  +{_at(alert['raised_at'], sc.start_ms):4.1f} s  "

    first = plants.first_out_of_spec
    drift = min(
        (a for a in live if a["line_id"] == sc.drift_line.line_id and a["sensor"] == "fill_level_ml"),
        key=lambda a: a["raised_at"],
        default=None,
    )
    if drift and first:
        lead = first["event_ms"] / 1000 - _at(drift["raised_at"], 0)  # > 0: paged before it
        print(
            f"{at(drift)}{sc.drift_line.line_id} fill level drifting {drift['direction']} "
            f"({drift['detector']}): "
            f"paged {abs(lead):.1f} s {'before' if lead >= 0 else 'after'} its first out-of-spec reading "
            f"(+{(first['event_ms'] - sc.start_ms) / 1000:.1f} s, {first['value']:.1f} ml)"
        )
    for a in live:
        if a["detector"] == "stuck":
            print(
                f"{at(a)}{a['line_id']} {a['sensor']} stuck at {a['opened_value']:g} "
                f"({a['threshold']:.0f} repeats)"
            )
        elif a["detector"] == "out_of_spec" and abs(a["opened_value"]) > 900:
            print(f"{at(a)}{a['line_id']} spike {a['sensor']} {a['opened_value']:g}")
        elif a["detector"] == "dead_letter_rate":
            print(f"{at(a)}{a['plant_id']} dead-letter rate {a['opened_value']:.0f}/min (a failing sensor)")
    kinds: dict[str, int] = {}
    for i in plants.truth.injections:
        if i["kind"] in ("nan", "future", "undecodable", "burst"):
            kinds[i["kind"]] = kinds.get(i["kind"], 0) + int(i["detail"].split()[0])
    nan = kinds.get("nan", 0) + kinds.get("burst", 0)
    print(
        f"  dead letters: {stats.dead_letters} (NaN sensors {nan}, "
        f"undecodable {kinds.get('undecodable', 0)}, "
        f"stamped 26 h ahead {kinds.get('future', 0)});\n  the monitor kept going: "
        f"{stats.readings:,} of {plants.truth.readings:,} readings scored"
    )
    span = stats.backfill_span
    if len(span) == 2:
        historical = sum(1 for a in alerts if not a["paged"])
        print(
            f"  {sc.offline_plant}'s backlog: {stats.backfill_readings:,} readings of "
            f"{sc.backlog_s / 3600:.0f} h "
            f"scored in {span[1] - span[0]:.1f} s on the backfill subject,\n  {historical} historical alerts "
            f"(not paged); live p99 publish->scored meanwhile {stats.live_p99(*span):.0f} ms"
        )
    print(f"  live p99 publish->scored {stats.live_p99():.0f} ms; {len(live)} alerts paged in all")


def _print_finance(session: Session, landing: Path, target_name: str | None, day: datetime) -> int:
    archive = session.archive
    sealed = ", ".join(archive.sealed) if archive else "nothing"
    as_of = day + timedelta(days=1, minutes=30)
    print(
        f"Finance reads the same stream: the archiver landed {archive.lines if archive else 0:,} lines, "
        f"sealed {sealed};\nthe nightly units job as of {as_of:%a %Y-%m-%d %H:%M} on that landing:"
    )
    target = resolve_target(target_name)
    summary = run_nightly("units", target, landing, as_of, quiet=True)
    if not summary.ok:
        print("\n".join(summary.lines()))
        return 1
    truth = session.plants.truth.good
    with Warehouse(target) as wh:
        rows = wh.query(
            f"select production_date, sum(good_units) from {target.schema}_published.daily_good_units "
            "group by production_date order by production_date"
        )
    ok = True
    for d, n in rows:
        want = sum(v for (td, _), v in truth.items() if td == str(d))
        ok &= int(n) == want
        verdict = "equal" if int(n) == want else "DIFFERENT"
        print(f"  {d:%a %Y-%m-%d}: {int(n):>9,} good units   truth {want:>9,}  {verdict}")
    return 0 if ok else 1
