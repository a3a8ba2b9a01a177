"""The live path: alerts that never wait for JetStream's Raft.

On a cluster that loses a node, every stream and consumer the node led has no leader until
the two others elect one, 4 to 9 s in nats-server 2.9 (fixed in the server): meanwhile a
consumer whose leader died delivers nothing, and a stream electing its leader stores nothing
(its gateways hold the readings, in order, until it does). Core NATS has no leader: a node
routes what is published to every subscriber, whichever node it reached.

So a gateway sends each live message twice:

- to JetStream (`<prefix>.in.live...`), stored once, acknowledged, re-sent until stored and in
  order (failover.Publisher): the record, which the archiver lands and the nightly job counts,
  and from which a monitor catches up (a restart, a plant's backlog);
- as a core NATS copy on the lane `now` (`<prefix>.in.now.<plant>.<line>`), at once, whatever
  JetStream is doing. The server's mapping partitions it like the stored subjects
  (`<prefix>.tele.now.<k>.<plant>.<line>`); no stream stores it. `LiveSender` keeps the copies
  of the last KEEP_S seconds and sends them again after a reconnection: a node killed under a
  gateway loses what was in flight to it.

A monitor worker listens to the `now` subjects of its partitions on two connections kept on two
different nodes (`LiveListeners`), so one node lost never silences the live path, and feeds each
message to its partition's processor (`LiveFeed`), which scores a reading once whichever path
brings it first: a message that continues its line (partition.PartitionProcessor.process_live)
is scored and its alerts paged at once; one that arrives ahead of an earlier message not yet
seen waits (at most WAIT_S, MAX_WAITING messages a partition) until that one comes on either
path, so a line is still scored in plc_seq order. What the live path scored, the stored path
then finds already had (no second scoring, no second alert); alerts and the checkpoint are
stored and acknowledged by the stored path's unit as before (monitor.Unit), which also
dead-letters: the live path pages, the stored path records.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import Any

import nats

from dayclose.errors import Unavailable
from dayclose.stream.alerts import alert_line
from dayclose.stream.config import StreamSettings
from dayclose.stream.failover import transient
from dayclose.stream.partition import Outputs, PartitionProcessor
from dayclose.stream.server import server_urls

KEEP_S = 5.0  # a gateway sends the copies of this long again after a reconnection
WAIT_S = 30.0  # a live message ahead of its line waits this long at most (the stored path has it)
MAX_WAITING = 2_000  # messages waiting per partition at most; beyond, the stored path brings them
LISTENERS = 2  # connections a worker listens on, each to another node (one on a single server)
WATCH_S = 0.25  # how often the listeners are checked to be on different nodes


class LiveSender:
    """A gateway's core NATS copies: sent at once, the last KEEP_S seconds sent again after the
    connection moved to another node (or could not send). Copies are cheap to repeat: the
    monitor takes a reading it has had for a copy."""

    def __init__(self, nc: Any, keep_s: float = KEEP_S):
        self.nc = nc
        self.keep_s = keep_s
        self.recent: deque[tuple[float, str, bytes, dict[str, str]]] = deque()
        self.epoch = self._epoch()
        self.broken = False
        self.sent = 0
        self.resent = 0

    def _epoch(self) -> int:
        return self.nc.stats["reconnects"]

    async def send(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        now = time.monotonic()
        while self.recent and now - self.recent[0][0] > self.keep_s:
            self.recent.popleft()
        if self.broken or self._epoch() != self.epoch:
            if not self.nc.is_connected:
                self.recent.append((now, subject, payload, headers))
                self.broken = True
                return
            self.epoch = self._epoch()
            self.broken = False
            for _t, s, p, h in list(self.recent):
                if not await self._publish(s, p, h):
                    break
                self.resent += 1
        self.recent.append((now, subject, payload, headers))
        await self._publish(subject, payload, headers)
        self.sent += 1

    async def _publish(self, subject: str, payload: bytes, headers: dict[str, str]) -> bool:
        try:
            await self.nc.publish(subject, payload, headers=headers)
            return True
        except Exception as exc:  # not connected (the gateways' connection buffers nothing)
            if not transient(exc):
                raise
            self.broken = True
            return False


class LiveFeed:
    """One partition's live path: scores what continues its lines at once, pages, and keeps the
    outputs for the unit that stores them (`take`)."""

    def __init__(self, processor: PartitionProcessor, stats: Any, page=None):
        self.processor = processor
        self.stats = stats
        self.page = page
        self.outbox: list[Outputs] = []
        self.waiting: dict[str, list[tuple[int, float, str, bytes, int]]] = {}  # line -> (lo, since, ...)
        self.n_waiting = 0
        self.dropped = 0  # messages left to the stored path (waited too long, or too many)

    def take(self) -> list[Outputs]:
        out, self.outbox = self.outbox, []
        return out

    async def on_message(self, msg: Any) -> None:
        self.offer(msg.subject, msg.data, (msg.headers or {}).get("Nats-Msg-Id"))

    def offer(self, subject: str, payload: bytes, msg_id: str | None = None) -> None:
        if msg_id is not None and self._had(msg_id):
            return  # a copy (the other listener's, or one sent again), known without decoding it
        received_ms = int(time.time() * 1000)
        out = self._score(subject, payload, received_ms)
        line = subject.rsplit(".", 1)[-1]
        if out is None:
            if self.n_waiting >= MAX_WAITING:
                self.dropped += 1
                return
            lo = _first_seq(payload)
            queue = self.waiting.setdefault(line, [])
            queue.append((lo, time.monotonic(), subject, payload, received_ms))
            queue.sort(key=lambda e: e[0])
            self.n_waiting += 1
        elif line in self.waiting:
            self.drain(line)

    def _had(self, msg_id: str) -> bool:
        """Whether a gateway's message id (`<line>:<first plc_seq>:<count>`) names readings its
        line has all had; any other id says nothing."""
        line, _, rest = msg_id.partition(":")
        first, _, count = rest.partition(":")
        consumed = self.processor.consumed.get(line)
        if consumed is None or not (first.isdigit() and count.isdigit()):
            return False
        return int(first) + int(count) - 1 <= consumed

    def drain(self, only: str | None = None) -> None:
        """Score the waiting messages that now continue their lines (the stored path brought
        what they waited for), in plc_seq order; drop those that waited WAIT_S."""
        now = time.monotonic()
        for line in [only] if only is not None else list(self.waiting):
            queue = self.waiting.get(line, [])
            keep = []
            for i, entry in enumerate(queue):
                _lo, since, subject, payload, received_ms = entry
                if now - since > WAIT_S:
                    self.dropped += 1
                elif self._score(subject, payload, received_ms) is None:
                    # the first that cannot continue its line: nor can those after it (higher)
                    keep = [e for e in queue[i:] if now - e[1] <= WAIT_S]
                    self.dropped += len(queue) - i - len(keep)
                    break
            self.n_waiting -= len(queue) - len(keep)
            if keep:
                self.waiting[line] = keep
            else:
                self.waiting.pop(line, None)

    def _score(self, subject: str, payload: bytes, received_ms: int) -> Outputs | None:
        out = self.processor.process_live(subject, payload, received_ms)
        if out is None or out.skipped:
            return out
        now = time.time()
        if self.page is not None:
            for alert in out.alerts:
                if alert["paged"] and alert["event"] == "open":
                    self.page(alert_line(alert))
        if out.scored:
            self.stats.readings += out.scored
            self.stats.live_readings += out.scored
            self.stats.latency_ms.append(now * 1000 - out.published_ms)
            self.stats.latency_at.append(now)
        if out.alerts:
            self.outbox.append(out)
        return out


def _first_seq(payload: bytes) -> int:
    from dayclose.stream.wire import decode  # the message decoded once more: rare (a gap)

    try:
        return int(decode(payload).seq.min())
    except Exception:
        return 0


async def _connect(settings: StreamSettings, name: str, first: str, urls: list[str]) -> nats.NATS:
    async def quiet(_exc: Exception) -> None:
        return None

    try:
        return await nats.connect(
            [first, *(u for u in urls if u != first)],
            name=name,
            connect_timeout=1,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.1,
            dont_randomize=True,
            ping_interval=5,
            max_outstanding_pings=3,
            error_cb=quiet,
        )
    except Exception as exc:  # nats raises several unrelated types for "could not connect"
        raise Unavailable(f"cannot connect to NATS at {first}: {exc}") from None


def _node(nc: nats.NATS) -> str | None:
    url = nc.connected_url if nc.is_connected else None
    return url.netloc if url is not None else None


class LiveListeners:
    """The `now` subjects of a worker's partitions, heard on two nodes at once: a connection
    each, kept apart (when a reconnection puts both on one node, the second is moved to another
    node, subscribed there before its old connection closes)."""

    def __init__(self, settings: StreamSettings, feeds: dict[int, LiveFeed], name: str, stats: Any = None):
        self.settings = settings
        self.stats = stats  # monitor.Stats: live_nodes, live_moves
        self.feeds = feeds
        self.name = name
        self.urls = server_urls(settings.url)
        self.conns: list[nats.NATS] = []
        self._watch: asyncio.Task | None = None

    async def _open(self, first: str, i: int) -> nats.NATS:
        nc = await _connect(self.settings, f"{self.name}-live-{i}", first, self.urls)
        for k, feed in self.feeds.items():
            await nc.subscribe(self.settings.live_filter(k), cb=feed.on_message)
        await nc.flush()
        return nc

    async def start(self) -> LiveListeners:
        for i in range(min(LISTENERS, len(self.urls))):
            self.conns.append(await self._open(self.urls[i], i))
        self._note()
        if len(self.conns) > 1:
            self._watch = asyncio.create_task(self._keep_apart())
        return self

    def _note(self) -> None:
        if self.stats is not None:
            self.stats.live_nodes[:] = [_node(nc) for nc in self.conns]

    async def _keep_apart(self) -> None:
        while True:
            await asyncio.sleep(WATCH_S)
            self._note()
            try:
                await self._move_if_together()
            except Exception:  # a node going away meanwhile: the next check tries again
                continue

    async def _move_if_together(self) -> None:
        a, b = _node(self.conns[0]), _node(self.conns[1])
        if a is not None and a == b:
            for url in self.urls:
                if url.split("://", 1)[-1] == a:
                    continue
                try:
                    fresh = await self._open(url, 1)
                except Unavailable:
                    continue  # that node is down: the next
                if _node(fresh) == a:  # it went to the same node after all
                    await fresh.close()
                    continue
                old, self.conns[1] = self.conns[1], fresh
                if self.stats is not None:
                    self.stats.live_moves += 1
                with contextlib.suppress(Exception):
                    await old.close()
                break

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        for nc in self.conns:
            with contextlib.suppress(Exception):
                await nc.close()
