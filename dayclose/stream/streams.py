"""The JetStream side: connecting, the three streams, the checkpoint bucket, the mapping check.

`dayclose stream setup` runs `setup`: it creates the telemetry, alerts and dead-letter
streams and the monitor's checkpoint bucket, or brings them to the configured settings
(running it again changes nothing), then checks that the server partitions the telemetry
subjects by line as configured (K partitions), with a probe that stores nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field

import nats
from nats.js import api
from nats.js.errors import BadRequestError, NoKeysError, NotFoundError

from dayclose.errors import DaycloseError, Unavailable
from dayclose.stream.config import (
    ALERTS_DUPLICATE_WINDOW_S,
    ALERTS_MAX_AGE_S,
    DEAD_DUPLICATE_WINDOW_S,
    DEAD_MAX_AGE_S,
    LANES,
    TELEMETRY_DUPLICATE_WINDOW_S,
    TELEMETRY_MAX_AGE_S,
    StreamSettings,
)
from dayclose.stream.server import answers, server_urls


async def connect(settings: StreamSettings, name: str, buffer_while_reconnecting: bool = True) -> nats.NATS:
    """A connection that reconnects forever once made, or Unavailable when nothing answers.

    NATS_URL may list a cluster's nodes, comma-separated: the client connects to one of them
    and, when that node goes away, to another (it also learns the nodes the server announces).
    Without buffer_while_reconnecting a publish fails while the client reconnects, rather than
    being kept and sent to the next node (failover.Publisher needs that to keep the order).
    """
    if not answers(settings.url, 2.0):
        raise Unavailable(
            f"nothing answers at {settings.url}: start nats-server -js there (or `dayclose stream server`), "
            "or set NATS_URL"
        )

    async def quiet(_exc: Exception) -> None:  # reconnects are expected; the caller sees real failures
        return None

    try:
        return await nats.connect(
            server_urls(settings.url),
            name=name,
            connect_timeout=2,
            max_reconnect_attempts=-1,
            # a node that died is tried again after this; the others at once
            reconnect_time_wait=0.25,
            # a node whose machine vanished closes no socket: its pings going unanswered is how a
            # client notices (3 x 5 s), where the default (2 x 120 s) would hold publishes for minutes
            ping_interval=5,
            max_outstanding_pings=3,
            **({} if buffer_while_reconnecting else {"pending_size": 0}),
            error_cb=quiet,
        )
    except Exception as exc:  # nats raises several unrelated types for "could not connect"
        raise Unavailable(f"cannot connect to NATS at {settings.url}: {exc}") from None


def stream_configs(settings: StreamSettings) -> list[api.StreamConfig]:
    """Telemetry, alerts and dead letters: file storage, limits retention, a duplicate window."""
    common = {
        "retention": api.RetentionPolicy.LIMITS,
        "storage": api.StorageType.FILE,
        "discard": api.DiscardPolicy.OLD,
        "num_replicas": settings.replicas,
    }
    p = settings.prefix
    return [
        api.StreamConfig(
            name=settings.telemetry_stream,
            description="dayclose: sensor readings of every line, partitioned by line (live and backfill)",
            subjects=[f"{p}.tele.{lane}.>" for lane in LANES],
            max_age=TELEMETRY_MAX_AGE_S,
            duplicate_window=TELEMETRY_DUPLICATE_WINDOW_S,
            **common,
        ),
        api.StreamConfig(
            name=settings.alerts_stream,
            description="dayclose: line alert openings and closings (live: paged; historical: not)",
            subjects=[f"{p}.alerts.>"],
            max_age=ALERTS_MAX_AGE_S,
            duplicate_window=ALERTS_DUPLICATE_WINDOW_S,
            **common,
        ),
        api.StreamConfig(
            name=settings.dead_stream,
            description="dayclose: readings and payloads the monitor could not score, with the reason",
            subjects=[f"{p}.dead.>"],
            max_age=DEAD_MAX_AGE_S,
            duplicate_window=DEAD_DUPLICATE_WINDOW_S,
            **common,
        ),
    ]


_COMPARED = ("subjects", "retention", "storage", "max_age", "duplicate_window", "num_replicas", "discard")


def _differs(have: api.StreamConfig, want: api.StreamConfig) -> list[str]:
    out = []
    for name in _COMPARED:
        a, b = getattr(have, name), getattr(want, name)
        if name == "subjects":
            a, b = sorted(a or []), sorted(b or [])
        elif isinstance(b, float | int) and not isinstance(b, bool) and a is not None:
            a, b = round(float(a), 3), round(float(b), 3)
        if a != b:
            out.append(name)
    return out


@dataclass
class SetupReport:
    server_version: str
    streams: list[tuple[str, str]] = field(default_factory=list)  # (name, created|updated|unchanged)
    partition_of_line: dict[str, int] = field(default_factory=dict)
    nodes: list[tuple[str, str]] = field(default_factory=list)  # a cluster's: (url, what its probe found)

    def lines(self, settings: StreamSettings) -> list[str]:
        out = [f"NATS {settings.url} (nats-server {self.server_version})"]
        out += [f"  {name}: {action}" for name, action in self.streams]
        out += [f"  node {url}: {found}" for url, found in self.nodes]
        counts = [0] * settings.partitions
        for k in self.partition_of_line.values():
            counts[k] += 1
        out.append(
            f"  partitions: K={settings.partitions}, lines per partition {min(counts)}..{max(counts)} "
            f"(mapping {settings.mapping()[0]} -> {settings.mapping()[1]})"
        )
        return out


async def ensure_streams(js, settings: StreamSettings) -> list[tuple[str, str]]:
    """Create each stream, or update it to the wanted settings; idempotent."""
    done = []
    for want in stream_configs(settings):
        try:
            info = await js.stream_info(want.name)
        except NotFoundError:
            info = None
        try:
            if info is None:
                await js.add_stream(config=want)
                done.append((f"stream {want.name}", "created"))
            elif changed := _differs(info.config, want):
                await js.update_stream(config=want)
                done.append((f"stream {want.name}", f"updated ({', '.join(changed)})"))
            else:
                done.append((f"stream {want.name}", "unchanged"))
        except BadRequestError as exc:
            raise DaycloseError(
                f"stream {want.name}: the server refused its settings: {exc.description}"
            ) from None
    try:
        await js.key_value(settings.state_bucket)
        info = await js.stream_info(f"KV_{settings.state_bucket}")  # the bucket's own stream
        if (info.config.num_replicas or 1) != settings.replicas:
            await js.update_stream(config=dataclasses.replace(info.config, num_replicas=settings.replicas))
            done.append((f"KV bucket {settings.state_bucket}", "updated (num_replicas)"))
        else:
            done.append((f"KV bucket {settings.state_bucket}", "unchanged"))
    except NotFoundError:  # BucketNotFoundError
        await js.create_key_value(
            api.KeyValueConfig(
                bucket=settings.state_bucket,
                description="dayclose monitor checkpoints: detector state and stream position per partition",
                history=1,
                storage=api.StorageType.FILE,
                replicas=settings.replicas,
            )
        )
        done.append((f"KV bucket {settings.state_bucket}", "created"))
    return done


async def probe_partitions(nc: nats.NATS, settings: StreamSettings, line_ids: list[str]) -> dict[str, int]:
    """Where the server maps each line, learnt by publishing on a probe lane nothing stores.

    Raises DaycloseError with the configuration to add when the server does not map the
    telemetry subjects, or maps them into a different number of partitions.
    """
    seen: dict[str, int] = {}
    done = asyncio.Event()

    async def got(msg) -> None:
        parts = msg.subject.split(".")
        seen[parts[5]] = int(parts[3])
        if len(seen) == len(line_ids):
            done.set()

    sub = await nc.subscribe(f"{settings.prefix}.tele.probe.>", cb=got)
    for line_id in line_ids:
        await nc.publish(settings.ingress_subject("probe", "P-probe", line_id), b"")
    await nc.flush()
    try:
        await asyncio.wait_for(done.wait(), 3.0)
    except TimeoutError:
        pass
    finally:
        await sub.unsubscribe()
    fix = (
        f"add this to the server's configuration and reload it (nats-server --signal reload):\n"
        f"{settings.mapping_config()}"
    )
    if len(seen) < len(line_ids):
        raise DaycloseError(
            f"the server at {settings.url} does not partition {settings.prefix}.in.> by line; " + fix
        )
    high = max(seen.values())
    if high != settings.partitions - 1:
        raise DaycloseError(
            f"the server at {settings.url} maps lines into partitions 0..{high}, "
            f"not K={settings.partitions}; " + fix
        )
    return seen


async def setup(settings: StreamSettings, line_ids: list[str]) -> SetupReport:
    nc = await connect(settings, "dayclose-setup")
    try:
        js = nc.jetstream()
        report = SetupReport(server_version=nc.connected_server_version._server_version)
        report.partition_of_line = await probe_partitions(nc, settings, line_ids)
        report.nodes = await probe_nodes(settings, line_ids, report.partition_of_line)
        report.streams = await ensure_streams(js, settings)
        return report
    finally:
        await nc.close()


async def probe_nodes(settings: StreamSettings, line_ids: list[str], expected: dict[str, int]) -> list:
    """On a cluster (several URLs), the mapping of each node: a node applies its own mapping
    to what its clients publish, so one without it (or with another K) would send its
    gateways' readings nowhere. A node that does not answer is reported, not refused."""
    urls = server_urls(settings.url)
    if len(urls) < 2:
        return []
    found = []
    for url in urls:
        if not answers(url, 1.0):
            found.append((url, "does not answer: its mapping not checked"))
            continue
        one = dataclasses.replace(settings, url=url)
        nc = await connect(one, "dayclose-setup-node")
        try:
            if await probe_partitions(nc, one, line_ids) != expected:
                raise DaycloseError(f"the node at {url} maps lines into other partitions than {urls[0]}")
        finally:
            await nc.close()
        found.append((url, "maps as configured"))
    return found


async def has_mapping(settings: StreamSettings, line_ids: list[str]) -> bool:
    """Whether the server at settings.url answers and partitions as configured."""
    try:
        nc = await connect(settings, "dayclose-probe")
    except Unavailable:
        return False
    try:
        await probe_partitions(nc, settings, line_ids)
        return True
    except DaycloseError:
        return False
    finally:
        await nc.close()


async def reset_monitors(settings: StreamSettings) -> tuple[int, int]:
    """Forget every monitor's position and state (to change K): delete the monitor consumers
    and the checkpoints. The archiver's consumer and the streams are kept."""
    nc = await connect(settings, "dayclose-reset")
    try:
        js = nc.jetstream()
        consumers = 0
        for stream in (settings.telemetry_stream, settings.dead_stream):
            for info in await js.consumers_info(stream):
                if info.name.startswith("monitor-"):
                    await js.delete_consumer(stream, info.name)
                    consumers += 1
        kv = await js.key_value(settings.state_bucket)
        try:
            keys = await kv.keys()
        except NoKeysError:
            keys = []
        for key in keys:
            await kv.purge(key)
        return consumers, len(keys)
    finally:
        await nc.close()
