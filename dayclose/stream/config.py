"""Names and settings of the streaming path, from the environment only.

One place names the NATS address, the subjects, the streams, the partition count K and
the plant clock, so the gateway simulator, the monitor, the archiver and `stream setup`
cannot disagree.

Subjects (prefix `dayclose`, DAYCLOSE_STREAM_PREFIX):

    dayclose.in.<lane>.<plant>.<line>              what a gateway publishes (lane: live | backfill)
    dayclose.tele.<lane>.<k>.<plant>.<line>        what the server stores, k = partition(K, line)
    dayclose.alerts.<live|historical>.<plant>.<line>  alert openings and closings
    dayclose.dead.<plant>.<line>                   dead letters, with their reason

The server rewrites `in` into `tele` with its subject mapping (mapping_config), so a
line always lands in the same partition and its detector state stays in one worker.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from dayclose.errors import DaycloseError

NATS_URL_DEFAULT = "nats://127.0.0.1:4222"
PARTITIONS_DEFAULT = 8
LANES = ("live", "backfill")
LIVE_LANE = "now"  # the gateways' core NATS copies of live messages (live.py): mapped, never stored

# Retention (seconds). Telemetry is kept three days: a plant offline for a weekend's
# night plus a slow archiver still finds its readings; the monitor only needs minutes.
TELEMETRY_MAX_AGE_S = 72 * 3600
TELEMETRY_DUPLICATE_WINDOW_S = 120  # a gateway retry inside this window is stored once
ALERTS_MAX_AGE_S = 30 * 86400
ALERTS_DUPLICATE_WINDOW_S = 24 * 3600  # an alert re-sent after a restart is stored once
DEAD_MAX_AGE_S = 7 * 86400
DEAD_DUPLICATE_WINDOW_S = 3600

_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


def _int_env(name: str, default: int, low: int, high: int) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise DaycloseError(f"{name}={text!r}: expected a whole number from {low} to {high}") from None
    if not low <= value <= high:
        raise DaycloseError(f"{name}={value}: expected a whole number from {low} to {high}")
    return value


@dataclass(frozen=True)
class StreamSettings:
    """Where the stream is and how it is cut: one value passed to every component."""

    url: str = NATS_URL_DEFAULT
    prefix: str = "dayclose"
    partitions: int = PARTITIONS_DEFAULT
    replicas: int = 1
    # The plants' clock minus this machine's, in seconds (<= 0). 0 in production; a
    # simulation replays a past night by running the plants' clock behind (tests, demo),
    # and the archiver and monitor read arrival times on that same clock.
    clock_offset_s: float = 0.0

    def __post_init__(self) -> None:
        if not _TOKEN.match(self.prefix):
            raise DaycloseError(f"stream prefix {self.prefix!r}: expected letters, digits, '_' or '-'")
        if not 1 <= self.partitions <= 1024:
            raise DaycloseError(f"partitions {self.partitions}: expected 1 to 1024")
        if self.clock_offset_s > 0:
            raise DaycloseError(
                f"plant clock offset {self.clock_offset_s} s: expected 0 or less (a plant clock ahead of "
                "the server would stamp readings before they could have been taken)"
            )

    # -- streams -----------------------------------------------------------------------
    @property
    def telemetry_stream(self) -> str:
        return f"{self.prefix.upper()}_TELEMETRY"

    @property
    def alerts_stream(self) -> str:
        return f"{self.prefix.upper()}_ALERTS"

    @property
    def dead_stream(self) -> str:
        return f"{self.prefix.upper()}_DEAD_LETTERS"

    @property
    def state_bucket(self) -> str:
        """The KV bucket of the monitor's checkpoints (detector state and stream position)."""
        return f"{self.prefix}_monitor_state"

    # -- subjects ----------------------------------------------------------------------
    def ingress_subject(self, lane: str, plant_id: str, line_id: str) -> str:
        return f"{self.prefix}.in.{lane}.{plant_id}.{line_id}"

    def stored_filter(self, lane: str | None = None, partition: int | None = None) -> str:
        """The stored telemetry subjects of a lane and partition (all when None)."""
        if lane is None:
            return f"{self.prefix}.tele.>"
        if partition is None:
            return f"{self.prefix}.tele.{lane}.>"
        return f"{self.prefix}.tele.{lane}.{partition}.>"

    def live_filter(self, partition: int) -> str:
        """The live path's core NATS copies of a partition (no stream stores the lane `now`)."""
        return f"{self.prefix}.tele.{LIVE_LANE}.{partition}.>"

    def alert_subject(self, historical: bool, plant_id: str, line_id: str | None) -> str:
        return f"{self.prefix}.alerts.{'historical' if historical else 'live'}.{plant_id}.{line_id or '-'}"

    def dead_subject(self, plant_id: str, line_id: str) -> str:
        return f"{self.prefix}.dead.{plant_id}.{line_id}"

    def parse_stored(self, subject: str) -> tuple[str, int, str, str]:
        """(lane, partition, plant, line) of a stored telemetry subject."""
        parts = subject.split(".")
        if len(parts) != 6 or parts[1] != "tele":
            raise DaycloseError(f"{subject}: not a stored telemetry subject (expected {self.prefix}.tele.*)")
        return parts[2], int(parts[3]), parts[4], parts[5]

    # -- the server's subject mapping ----------------------------------------------------
    def mapping(self) -> tuple[str, str]:
        """(source, destination) of the server's subject mapping that partitions by line."""
        k = self.partitions
        return (
            f"{self.prefix}.in.*.*.*",
            f"{self.prefix}.tele.{{{{wildcard(1)}}}}.{{{{partition({k},3)}}}}.{{{{wildcard(2)}}}}.{{{{wildcard(3)}}}}",
        )

    def mapping_config(self) -> str:
        """The server configuration block that partitions the telemetry subjects by line."""
        source, dest = self.mapping()
        return f'mappings = {{\n  "{source}": "{dest}"\n}}\n'


def settings(
    url: str | None = None,
    prefix: str | None = None,
    partitions: int | None = None,
    replicas: int | None = None,
    clock_offset_s: float | None = None,
) -> StreamSettings:
    """The settings from arguments, else NATS_URL, DAYCLOSE_STREAM_PREFIX,
    DAYCLOSE_STREAM_PARTITIONS, DAYCLOSE_STREAM_REPLICAS, DAYCLOSE_PLANT_CLOCK_OFFSET_S."""
    if clock_offset_s is None:
        text = os.environ.get("DAYCLOSE_PLANT_CLOCK_OFFSET_S", "0") or "0"
        try:
            clock_offset_s = float(text)
        except ValueError:
            raise DaycloseError(
                f"DAYCLOSE_PLANT_CLOCK_OFFSET_S={text!r}: expected a number of seconds, 0 or less"
            ) from None
    return StreamSettings(
        url=url or os.environ.get("NATS_URL") or NATS_URL_DEFAULT,
        prefix=prefix or os.environ.get("DAYCLOSE_STREAM_PREFIX") or "dayclose",
        partitions=partitions or _int_env("DAYCLOSE_STREAM_PARTITIONS", PARTITIONS_DEFAULT, 1, 1024),
        replicas=replicas or _int_env("DAYCLOSE_STREAM_REPLICAS", 1, 1, 5),
        clock_offset_s=clock_offset_s,
    )
