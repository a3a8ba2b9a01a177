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
"""

from __future__ import annotations

from nats.js import api
from nats.js.errors import NotFoundError

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
