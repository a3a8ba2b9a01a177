"""Durable pull consumers that resume exactly where their owner's own record says.

JetStream delivers at least once: a worker that dies holding unacknowledged messages gets
them back only after the ack wait, and meanwhile newer messages are delivered first. A
scorer whose state depends on order cannot take that, so on start each owner brings its
durable consumer in line with what it knows is done:

- a monitor unit knows the last stream sequence in its checkpoint: the consumer is kept if
  nothing is pending and its ack floor is that sequence, else recreated to deliver from the
  next one (messages are kept by the stream's limits retention, not by the consumer);
- the archiver knows only that acknowledged messages are written and synced: the consumer is
  recreated from its own ack floor when a previous instance left messages unacknowledged,
  so they come back at once (some twice: the finance path counts a unit once).

Each durable has one owner at a time (partitions are assigned statically; one archiver).

On a cluster the same holds while running: when a node dies, messages it had handed over
to a consumer but that never reached the owner are lost in flight, and JetStream would only
redeliver them after the ack wait, behind newer ones. A consumer numbers its deliveries 1, 2,
3...; `Continuity` notices a number skipped (or repeated, by a new leader whose copy of the
consumer lagged) and the owner then brings its consumer in line again, as on start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from nats.js import api
from nats.js.errors import NotFoundError

from dayclose.stream.failover import retrying, transient

ACK_WAIT_S = 30.0
MAX_ACK_PENDING = 20_000


def consumer_config(name: str, filter_subject: str, start_seq: int | None) -> api.ConsumerConfig:
    by_seq = start_seq is not None and start_seq > 1
    return api.ConsumerConfig(
        name=name,
        durable_name=name,
        filter_subject=filter_subject,
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE if by_seq else api.DeliverPolicy.ALL,
        opt_start_seq=start_seq if by_seq else None,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=ACK_WAIT_S,
        max_deliver=-1,
        max_ack_pending=MAX_ACK_PENDING,
    )


async def align(js, stream: str, name: str, filter_subject: str, done_through: int | None) -> str:
    """Make durable `name` deliver everything after `done_through` (None: after its ack floor).

    Returns what it did: created, kept or reset.
    """
    try:
        info = await js.consumer_info(stream, name)
    except NotFoundError:
        info = None
    if info is None:
        start = None if not done_through else done_through + 1
        await js.add_consumer(stream, config=consumer_config(name, filter_subject, start))
        return "created"
    floor = info.ack_floor.stream_seq if info.ack_floor else 0
    if done_through is None:
        if not info.num_ack_pending:
            return "kept"
        done_through = floor
    elif not info.num_ack_pending and floor == done_through:
        return "kept"
    await js.delete_consumer(stream, name)
    await js.add_consumer(stream, config=consumer_config(name, filter_subject, done_through + 1))
    return "reset"


async def ack_all(msgs: list) -> None:
    """Acknowledge messages; an acknowledgement that cannot be sent while the client reconnects
    to another node waits for it."""
    for m in msgs:
        await retrying(m.ack)


def delivery_seq(msg) -> int:
    """The consumer's own number of this delivery (1, 2, 3... for one consumer)."""
    tokens = msg.reply.split(".") if msg.reply else ()
    if len(tokens) == 9 and tokens[0] == "$JS":
        return int(tokens[6])
    return msg.metadata.sequence.consumer


class Continuity:
    """Notices deliveries of one consumer lost in flight (see the module docstring)."""

    def __init__(self) -> None:
        self.last: int | None = None

    def first_break(self, msgs: list) -> int | None:
        """The index of the first message that does not follow the one before it, else None."""
        for i, msg in enumerate(msgs):
            seq = delivery_seq(msg)
            if self.last is not None and seq != self.last + 1:
                return i
            self.last = seq
        return None

    def reset(self) -> None:
        """After the consumer was brought in line (or recreated: it numbers from 1 again)."""
        self.last = None


def stored_ms(msg) -> int:
    """When the server stored a message (its clock), in Unix ms."""
    return position(msg)[1]


def position(msg) -> tuple[int, int]:
    """(stream sequence, stored time in Unix ms) of a JetStream message, read from its reply
    subject `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>`
    (the client's own parser builds a datetime and a dataclass a message: a hot path here)."""
    tokens = msg.reply.split(".") if msg.reply else ()
    if len(tokens) == 9 and tokens[0] == "$JS":
        return int(tokens[5]), int(tokens[7]) // 1_000_000
    md = msg.metadata  # the longer form with a domain and an account hash
    return md.sequence.stream, int(md.timestamp.timestamp() * 1000)


class Puller:
    """A durable pull consumer read in bulk.

    nats-py's `fetch` waits for each message of a batch in a task of its own (about 15 us a
    message, a fifth of scoring a message of 100 readings). Here a pull request of up to
    `batch` messages stays open on the server until filled or expired (REQUEST_S); the
    messages it delivers are collected by a subscription callback, and `fetch` returns
    whatever has arrived as soon as anything has, so latency is that of the delivery, not of
    a full batch. A new request is sent when the previous one has ended: filled, expired
    (status 408), or silent for longer than its expiry. The last case was measured: under a
    backlog replay the server (2.9) now and then answers a waiting request neither with
    messages nor with its 408, so a request is not trusted beyond REQUEST_S + GRACE_S after
    its last message.

    A request also asks for at most MAX_BYTES, so what is in flight to a worker stays far
    below the server's limit for a slow consumer (64 MB of pending data, after which it cuts
    the connection): 16 consumers of 100-reading JSON messages (20 KB) once had 45 MB in
    flight and lost it. MAX_BYTES is above the server's largest message (1 MB), which could
    otherwise never be delivered.
    """

    REQUEST_S = 0.25
    GRACE_S = 0.05
    MAX_BYTES = 2 * 1024 * 1024

    def __init__(self, nc, stream: str, durable: str, api_prefix: str = "$JS.API"):
        self.nc = nc
        self.subject = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.inbox = ""
        self.sub = None
        self.ready: list = []
        self.arrived = asyncio.Event()
        self.open_for = 0  # messages the open request may still deliver
        self.open_until = 0.0
        self.refused: str | None = None  # a status other than expiry ended the last request
        self.error: Exception | None = None

    async def start(self) -> Puller:
        self.inbox = self.nc.new_inbox()
        self.sub = await self.nc.subscribe(
            self.inbox, cb=self._deliver, pending_msgs_limit=-1, pending_bytes_limit=-1
        )
        return self

    async def _deliver(self, msg) -> None:
        status = msg.headers.get(api.Header.STATUS) if msg.headers else None
        if status is None:
            self.ready.append(msg)
            self.open_for -= 1
            self.open_until = time.monotonic() + self.REQUEST_S + self.GRACE_S
        elif status == "100":  # a heartbeat
            return
        else:
            self.open_for = 0
            description = msg.headers.get(api.Header.DESCRIPTION, "")
            # ended as asked: expired (408) or its MAX_BYTES reached (409); anything else (404 no
            # messages, 409 leader change or too many requests waiting, 503 no leader on a
            # cluster that lost a node, an error) is a refusal
            if status != "408" and not (status == "409" and "MaxBytes" in description):
                self.refused = f"status {status} {description}".strip()
                if status not in ("404", "409", "503"):
                    self.error = RuntimeError(f"pull consumer {self.subject}: {self.refused}")
        self.arrived.set()

    async def fetch(self, batch: int, timeout: float) -> list:
        """The messages delivered so far, waiting up to `timeout` seconds for the first."""
        deadline = time.monotonic() + timeout
        while not self.ready and self.error is None:
            now = time.monotonic()
            if now >= deadline:
                break
            if self.open_for <= 0 or now >= self.open_until:
                if self.refused is not None:  # refused last time: not again in a tight loop
                    self.refused = None
                    await asyncio.sleep(deadline - now)
                    break
                expires = min(timeout, self.REQUEST_S)
                self.open_for, self.open_until = batch, now + expires + self.GRACE_S
                request = {"batch": batch, "expires": int(expires * 1e9), "max_bytes": self.MAX_BYTES}
                try:
                    await self.nc.publish(self.subject, json.dumps(request).encode(), reply=self.inbox)
                except Exception as exc:  # reconnecting with a full buffer: asked again later
                    if not transient(exc):
                        raise
                    self.open_for, self.refused = 0, f"not sent: {type(exc).__name__}"
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), min(deadline, self.open_until) - now)
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        msgs, self.ready = self.ready, []
        return msgs

    async def stop(self) -> None:
        if self.sub is not None:
            await self.sub.unsubscribe()
