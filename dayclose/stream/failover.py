"""Riding out a lost NATS node: transient failures retried, publishes re-sent until stored.

On a JetStream cluster a node killed outright takes with it the connections of the clients
on it and the leadership of every stream and consumer it led. nats-py reconnects to another
node by itself (streams.connect), but what was in flight is lost, and a stream or consumer
whose leader died answers nothing until its followers elect a new one: nats-server's Raft
waits 4 to 9 s without a heartbeat before a follower campaigns (fixed in the server). Until
then a publish or a JetStream API call gets "no responders" (503) at once, or no answer.

So every component treats those failures as a pause, not an error:

- `retrying(call)`: an API call (a KV checkpoint, consumer info, a consumer reset) is tried
  again with a growing pause, for up to RETRY_FOR_S, before the failure is raised;
- `Publisher`: each publish keeps its subject, payload and headers until the stream
  acknowledges it; one refused or not acknowledged within ACK_TIMEOUT_S is sent again with
  the same `Nats-Msg-Id`, which the stream's duplicate window stores once (an acknowledgement
  lost with a node makes the first copy look lost: the server then reports the second as a
  duplicate). After any trouble the unacknowledged messages go again in their order before
  anything new (see the class), one probing first while the stream has no leader, so a cluster
  in an election is not flooded with copies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.js import api

T = TypeVar("T")

RETRY_FOR_S = 120.0  # an election or two and a reconnect; beyond it the cluster has lost its majority
ACK_TIMEOUT_S = 2.0  # a publish without an acknowledgement by then is sent again (same id)
PAUSE_MIN_S = 0.05
PAUSE_MAX_S = 0.25  # short: what waits on a retry after the leader is back is latency

_TRANSIENT = (
    TimeoutError,  # nats.errors.TimeoutError and FetchTimeoutError derive from it
    nats.errors.NoRespondersError,
    nats.errors.OutboundBufferLimitError,  # the reconnect buffer is full: wait for the new node
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,  # 503: no leader (yet), JetStream not current
)


def transient(exc: BaseException) -> bool:
    """A failure that a lost node or a leader election explains, and that passes."""
    return isinstance(exc, _TRANSIENT)


async def retrying(call: Callable[[], Awaitable[T]], retry_for_s: float = RETRY_FOR_S) -> T:
    """`await call()` until it succeeds; a transient failure is retried after a growing pause,
    for up to retry_for_s, then raised like any other."""
    deadline = time.monotonic() + retry_for_s
    pause = PAUSE_MIN_S
    while True:
        try:
            return await call()
        except Exception as exc:
            if not transient(exc) or time.monotonic() > deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(PAUSE_MAX_S, pause * 2)


@dataclass
class _Out:
    subject: str
    payload: bytes
    headers: dict[str, str] | None
    future: asyncio.Future
    sent: float
    epoch: int  # the connection's reconnect count when it was sent


class Publisher:
    """JetStream publishes acknowledged at least once, stored once (by Nats-Msg-Id), in order.

    `publish` sends without waiting for the acknowledgement; `settle` returns when everything
    sent so far is acknowledged. Publish only messages with a Nats-Msg-Id: a copy sent again
    without one would be stored twice.

    Order matters downstream: the monitor scores a line's readings in plc_seq order and takes a
    reading below the highest it has scored for a copy. So once anything goes wrong (a refusal,
    no acknowledgement in time, or the connection moved to another node, which loses what was
    in flight) nothing new is sent until every message not yet acknowledged has been sent again,
    oldest first: a probe first (while a stream elects its leader every copy would be refused at
    once), the others when it is stored. The connection must not buffer publishes while it
    reconnects (streams.connect(buffer_while_reconnecting=False)): such a buffer is flushed to
    the new node ahead of what the lost node swallowed.
    """

    def __init__(
        self, js: Any, nc: Any = None, ack_timeout_s: float = ACK_TIMEOUT_S, retry_for_s: float = RETRY_FOR_S
    ):
        self.js = js
        self.nc = nc
        self.ack_timeout_s = ack_timeout_s
        self.retry_for_s = retry_for_s
        self.pending: list[_Out] = []
        self.resent = 0  # copies sent again after a refusal, a missing acknowledgement or a reconnect
        self.duplicates = 0  # acknowledgements that said: already stored
        self._trouble = False  # a refusal came back since the last settle
        self._settling = asyncio.Lock()

    def __len__(self) -> int:
        return len(self.pending)

    def _epoch(self) -> int:
        return self.nc.stats["reconnects"] if self.nc is not None else 0

    def _refused(self, future: asyncio.Future) -> None:
        if not future.cancelled() and future.exception() is not None:
            self._trouble = True

    async def _send(self, subject: str, payload: bytes, headers: dict[str, str] | None) -> asyncio.Future:
        future = await retrying(
            lambda: self.js.publish_async(subject, payload, headers=headers), self.retry_for_s
        )
        future.add_done_callback(self._refused)
        return future

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str] | None) -> None:
        while True:
            if (
                self._trouble
                or self._settling.locked()
                or (self.pending and self.pending[0].epoch != self._epoch())
            ):
                await self.settle()
            epoch = self._epoch()
            try:
                future = await self.js.publish_async(subject, payload, headers=headers)
            except Exception as exc:  # not connected (nothing buffered while reconnecting)
                if not transient(exc):
                    raise
                self._trouble = True
                await asyncio.sleep(PAUSE_MIN_S)
                continue
            future.add_done_callback(self._refused)
            self.pending.append(_Out(subject, payload, headers, future, time.monotonic(), epoch))
            return

    async def _resend(self, out: _Out) -> None:
        if not out.future.done():
            out.future.cancel()  # its acknowledgement, should it come, is no longer awaited
        out.epoch = self._epoch()
        out.future = await self._send(out.subject, out.payload, out.headers)
        out.sent = time.monotonic()
        self.resent += 1

    def _outcome(self, out: _Out, now: float, epoch: int) -> str:
        """acked | failed (to be sent again) | waiting; raises a failure that is not transient."""
        f = out.future
        if f.done() and not f.cancelled():
            exc = f.exception()
            if exc is None:
                return "acked"
            if not transient(exc):
                raise exc
            return "failed"
        if out.epoch != epoch or now - out.sent >= self.ack_timeout_s:
            return "failed"  # lost with the node it went to, or not acknowledged in time
        return "waiting"

    async def settle(self) -> list[api.PubAck]:
        """Wait until every message published so far is acknowledged; their acknowledgements."""
        async with self._settling:
            acks: list[api.PubAck] = []
            waiting, self.pending = self.pending, []
            self._trouble = False
            deadline = time.monotonic() + self.retry_for_s
            pause = PAUSE_MIN_S
            while waiting:
                await asyncio.wait(
                    [o.future for o in waiting],
                    timeout=self.ack_timeout_s,
                    return_when=asyncio.FIRST_EXCEPTION,
                )
                now, epoch = time.monotonic(), self._epoch()
                states = [self._outcome(o, now, epoch) for o in waiting]
                acks += [o.future.result() for o, st in zip(waiting, states, strict=True) if st == "acked"]
                rest = [o for o, st in zip(waiting, states, strict=True) if st != "acked"]
                if "failed" in states:
                    if now > deadline:
                        raise TimeoutError(
                            f"{len(rest)} messages not acknowledged by JetStream within "
                            f"{self.retry_for_s:.0f} s (first: {rest[0].subject})"
                        )
                    # everything not acknowledged goes again, in order: the oldest as a probe
                    await asyncio.sleep(pause)
                    probe = rest[0]
                    await self._resend(probe)
                    await asyncio.wait([probe.future], timeout=self.ack_timeout_s)
                    if self._outcome(probe, time.monotonic(), self._epoch()) == "acked":
                        acks.append(probe.future.result())
                        rest = rest[1:]
                        for out in rest:
                            await self._resend(out)
                        pause = PAUSE_MIN_S
                    else:
                        pause = min(PAUSE_MAX_S, pause * 2)
                waiting = rest
            self._trouble = False
            self.duplicates += sum(bool(a.duplicate) for a in acks)
            return acks
