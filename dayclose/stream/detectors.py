"""Line detectors over a message's readings, with the state each line carries.

For each line (and lane: live, late, backfill), over the readings of one message in one pass:

| detector | on | a reading meets the condition when (limits from seeds/sensor_specs) |
|---|---|---|
| out_of_spec | each sensor | its value is outside the SKU's [min, max] |
| rate_of_change | each sensor | it differs from the previous value by more than the spec width (max - min) |
| stuck | each sensor | it is the 30th (or later) identical value in a row |
| drift_cusum | fill level | the two-sided CUSUM of (fill - target) / sigma, slack k = 1, exceeds h = 10 |
| drift_ewma | fill level | the EWMA (lambda 0.05) is over 2.5 sigma from target (62% of the way to a limit) |

target = mid-spec, sigma = spec width / 8. Fill levels enter the drift statistics clipped to the
spec limits (+-4 sigma), so one garbage spike (9999.9 ml) cannot fake a drift: it is an
out_of_spec and rate_of_change alert, while a real drift past a limit still adds 3 sigma a
reading to the CUSUM.

sigma = width / 8 is the spread of a line that just meets Cp 1.33; a better line is less noisy
than assumed, so these thresholds err toward silence. Measured: no drift alarm in 10 million
in-control readings of a Cp 1.33 line (the textbook k = 0.5, h = 5 alarms every few hundred;
h = 8 about once in 10 million), none in 200,000 per SKU at Cp 2 on any detector
(test_stream_detectors). A mean 2 sigma off target alarms within about 10 readings, so a
drift that creeps toward a limit alarms before its first out-of-spec reading.

An alarm opens on the first reading whose condition holds and closes after `clear_after` (25)
readings in a row without it, so one alert marks one episode: never one per reading.

The conditions, the CUSUM, the EWMA, the run lengths and the alarm state machine are one loop
over the readings, compiled by numba (`_scan`): exactly the reading-by-reading definition, at
about 0.04 us a reading, where numpy over the message (some 40 array operations) cost 0.45 us.
Python runs only per message and per alarm change.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np

from dayclose.settings import PROJECT_DIR
from dayclose.stream.wire import SENSORS

SEEDS_DIR = PROJECT_DIR / "seeds"

# The rows of the condition matrix: (detector, sensor index).
ROWS: tuple[tuple[str, int], ...] = (
    *(("out_of_spec", s) for s in range(3)),
    *(("rate_of_change", s) for s in range(3)),
    *(("stuck", s) for s in range(3)),
    ("drift_cusum", 0),  # high
    ("drift_cusum", 0),  # low
    ("drift_ewma", 0),
)
CUSUM_HIGH, CUSUM_LOW, EWMA_ROW = 9, 10, 11
SPEC_COLUMNS = (  # seeds/sensor_specs.csv, in the order of wire.SENSORS
    ("fill_level_min_ml", "fill_level_max_ml"),
    ("capper_torque_min_nm", "capper_torque_max_nm"),
    ("temperature_min_c", "temperature_max_c"),
)
NEVER = -(1 << 40)  # position of "no true condition yet"


@dataclass(frozen=True)
class Thresholds:
    """Every threshold of the detectors and of the lanes, in one place (docs/streaming.md)."""

    sigma_share: float = 1 / 8  # sigma assumed = spec width x this (Cp 1.33)
    cusum_k: float = 1.0  # slack, in sigma
    cusum_h: float = 10.0  # decision interval, in sigma
    cusum_cap: float = 20.0  # the CUSUM is capped at this after each message (bounded recovery)
    drift_clip: float = 4.0  # fill enters the drift statistics clipped to +-4 sigma: the spec limits
    ewma_lambda: float = 0.05
    ewma_limit: float = 2.5  # in sigma from target
    roc_share: float = 1.0  # a step larger than the spec width between two consecutive units
    stuck_after: int = 30  # identical consecutive values
    clear_after: int = 25  # readings without the condition before an alarm closes
    allowed_lateness_ms: int = 10_000  # a live reading this far behind its line's watermark is late
    max_live_delay_ms: int = 60_000  # a reading reaching the server later than this is not live
    future_tolerance_ms: int = 60_000  # event_at after arrival by more than this: dead letter


@dataclass(frozen=True)
class Spec:
    """A SKU's sensor limits as arrays over the three sensors (fill, torque, temperature)."""

    sku: str
    lo: np.ndarray
    hi: np.ndarray
    roc: np.ndarray  # largest step between consecutive units
    target: float  # fill level target: mid-spec
    sigma: float  # fill level sigma assumed


@dataclass(frozen=True)
class Reference:
    """What the monitor knows of the plants: lines (with their plant) and SKU specs."""

    plant_of_line: dict[str, str]
    specs: dict[str, Spec]

    @classmethod
    def from_seeds(cls, seeds: Path = SEEDS_DIR, th: Thresholds | None = None) -> Reference:
        th = th or Thresholds()
        with open(seeds / "lines.csv") as fh:
            plant_of_line = {r["line_id"]: r["plant_id"] for r in csv.DictReader(fh)}
        specs = {}
        with open(seeds / "sensor_specs.csv") as fh:
            for r in csv.DictReader(fh):
                lo = np.array([float(r[low]) for low, _ in SPEC_COLUMNS])
                hi = np.array([float(r[high]) for _, high in SPEC_COLUMNS])
                width = hi - lo
                specs[r["sku"]] = Spec(
                    sku=r["sku"],
                    lo=lo,
                    hi=hi,
                    roc=width * th.roc_share,
                    target=float(lo[0] + hi[0]) / 2,
                    sigma=float(width[0]) * th.sigma_share,
                )
        return cls(plant_of_line, specs)


@dataclass
class LaneState:
    """What one line carries from message to message in one lane (live, late or backfill)."""

    sku: str | None = None
    last: np.ndarray = field(default_factory=lambda: np.full(3, np.nan))  # previous values
    run: np.ndarray = field(default_factory=lambda: np.zeros(3, dtype=np.int64))  # equal values in a row
    cusum: np.ndarray = field(default_factory=lambda: np.zeros(2))  # high, low (sigma)
    ewma: float = float("nan")
    since: np.ndarray = field(default_factory=lambda: np.full(len(ROWS), -NEVER, dtype=np.int64))
    open: dict[int, dict] = field(default_factory=dict)  # row -> the open alert's record
    hwm: int = -1  # highest plc_seq scored (a lower or equal one is a copy: skipped)
    scored: int = 0
    watermark_ms: int = NEVER  # live lane: the highest event time seen

    def to_dict(self) -> dict:
        return {
            "sku": self.sku,
            "last": [None if np.isnan(v) else float(v) for v in self.last],
            "run": self.run.tolist(),
            "cusum": self.cusum.tolist(),
            "ewma": None if np.isnan(self.ewma) else self.ewma,
            "since": self.since.tolist(),
            "open": {str(k): v for k, v in self.open.items()},
            "hwm": self.hwm,
            "scored": self.scored,
            "watermark_ms": self.watermark_ms,
        }

    @classmethod
    def from_dict(cls, d: dict) -> LaneState:
        return cls(
            sku=d["sku"],
            last=np.array([np.nan if v is None else v for v in d["last"]], dtype=float),
            run=np.array(d["run"], dtype=np.int64),
            cusum=np.array(d["cusum"], dtype=float),
            ewma=float("nan") if d["ewma"] is None else float(d["ewma"]),
            since=np.array(d["since"], dtype=np.int64),
            open={int(k): v for k, v in d["open"].items()},
            hwm=int(d["hwm"]),
            scored=int(d["scored"]),
            watermark_ms=int(d["watermark_ms"]),
        )


@dataclass
class Change:
    """An alarm that opened or closed at reading `index` of the message."""

    index: int
    row: int
    opened: bool
    value: float
    threshold: float
    direction: str | None

    @property
    def detector(self) -> str:
        return ROWS[self.row][0]

    @property
    def sensor(self) -> str:
        return SENSORS[ROWS[self.row][1]]


@numba.njit(cache=True, nogil=True)
def _scan(
    x: np.ndarray,  # (3, n) float64: the readings, one sensor a row
    lo: np.ndarray,
    hi: np.ndarray,
    roc: np.ndarray,
    target: float,
    sigma: float,
    cusum_k: float,
    cusum_h: float,
    cusum_cap: float,
    drift_clip: float,
    ewma_lambda: float,
    ewma_limit: float,
    stuck_after: int,
    clear_after: int,
    last: np.ndarray,  # (3,) state, updated in place from here on
    run: np.ndarray,  # (3,)
    cus: np.ndarray,  # (2,) high, low
    since: np.ndarray,  # (len(ROWS),) readings since each condition last held
    ewma_start: float,  # in sigma from target
    stats: np.ndarray,  # (3, n) out: CUSUM high, CUSUM low, EWMA (sigma), for the alerts' values
) -> tuple[np.ndarray, float]:
    """Every detector over one message, reading by reading (compiled): the alarm changes as
    rows of (reading index, row, opened), and the EWMA at the end (sigma from target)."""
    n = x.shape[1]
    rows = since.shape[0]
    changes = np.empty((rows * n, 3), dtype=np.int64)
    m = 0
    cond = np.empty(rows, dtype=np.bool_)
    s_hi, s_lo, e = cus[0], cus[1], ewma_start
    for i in range(n):
        for k in range(3):
            v = x[k, i]
            cond[k] = v < lo[k] or v > hi[k]
            cond[3 + k] = abs(v - last[k]) > roc[k]  # NaN (no previous value) compares False
            run[k] = run[k] + 1 if v == last[k] else 1
            cond[6 + k] = run[k] >= stuck_after
            last[k] = v
        z = min(max((x[0, i] - target) / sigma, -drift_clip), drift_clip)
        s_hi = max(0.0, s_hi + z - cusum_k)
        s_lo = max(0.0, s_lo - z - cusum_k)
        e = (1.0 - ewma_lambda) * e + ewma_lambda * z
        cond[9] = s_hi > cusum_h
        cond[10] = s_lo > cusum_h
        cond[11] = abs(e) > ewma_limit
        stats[0, i], stats[1, i], stats[2, i] = s_hi, s_lo, e
        for r in range(rows):
            was = since[r] < clear_after
            since[r] = 0 if cond[r] else since[r] + 1
            now = since[r] < clear_after
            if now != was:
                changes[m, 0], changes[m, 1], changes[m, 2] = i, r, now
                m += 1
    cus[0], cus[1] = min(s_hi, cusum_cap), min(s_lo, cusum_cap)
    return changes[:m], e


def warm_up() -> None:
    """Load the compiled scan (compile it, on first use after an install)."""
    spec = Spec("warm-up", np.zeros(3), np.ones(3), np.ones(3), 0.5, 0.125)
    score(LaneState(), spec, Thresholds(), np.full((3, 2), 0.5))


def score(state: LaneState, spec: Spec, th: Thresholds, x: np.ndarray) -> list[Change]:
    """Run every detector over one message's readings x (3, n) of one line; update its state.

    Returns the alarms that opened or closed, in reading order (then row order).
    """
    if state.sku != spec.sku:  # a new SKU on the line: its drift statistics start over
        state.sku = spec.sku
        state.cusum[:] = 0.0
        state.ewma = spec.target
    x = np.ascontiguousarray(x, dtype=np.float64)
    before = state.last.copy()
    stats = np.empty((3, x.shape[1]))
    found, e = _scan(
        x,
        spec.lo,
        spec.hi,
        spec.roc,
        spec.target,
        spec.sigma,
        th.cusum_k,
        th.cusum_h,
        th.cusum_cap,
        th.drift_clip,
        th.ewma_lambda,
        th.ewma_limit,
        th.stuck_after,
        th.clear_after,
        state.last,
        state.run,
        state.cusum,
        state.since,
        (state.ewma - spec.target) / spec.sigma,
        stats,
    )
    state.ewma = spec.target + e * spec.sigma
    state.scored += x.shape[1]
    return [_change(row, i, bool(opened), x, before, stats, spec, th) for i, row, opened in found.tolist()]


def _change(
    row: int,
    i: int,
    opened: bool,
    x: np.ndarray,
    before: np.ndarray,
    stats: np.ndarray,
    spec: Spec,
    th: Thresholds,
) -> Change:
    detector, sensor = ROWS[row]
    value = float(x[sensor, i])
    if detector == "out_of_spec":
        high = value > spec.hi[sensor]
        return Change(
            i,
            row,
            opened,
            value,
            float(spec.hi[sensor] if high else spec.lo[sensor]),
            "high" if high else "low" if value < spec.lo[sensor] else None,
        )
    if detector == "rate_of_change":
        previous = x[sensor, i - 1] if i else before[sensor]
        return Change(i, row, opened, value, float(spec.roc[sensor]), "high" if value > previous else "low")
    if detector == "stuck":
        return Change(i, row, opened, value, float(th.stuck_after), None)
    if row == CUSUM_HIGH:
        return Change(i, row, opened, float(stats[0, i]), th.cusum_h, "high")
    if row == CUSUM_LOW:
        return Change(i, row, opened, float(stats[1, i]), th.cusum_h, "low")
    ewma_value = spec.target + float(stats[2, i]) * spec.sigma
    high = ewma_value > spec.target
    limit = spec.target + (1 if high else -1) * th.ewma_limit * spec.sigma
    return Change(i, row, opened, ewma_value, limit, "high" if high else "low")
