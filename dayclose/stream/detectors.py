"""Line detectors, vectorised over a message's readings, with the state each line carries.

For each line (and lane: live, late, backfill), over the readings of one message at once:

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
readings in a row without it, so one alert marks one episode: never one per reading. The
alarm state machine, the CUSUM (a Lindley recursion: S_t = C_t - min(-S_0, min_j C_j) over the
cumulative sums C), the EWMA and the run lengths are computed with numpy over the whole
message; Python runs only per message and per alarm change.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

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
_EWMA_CHUNK = 256


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


_POWERS: dict[float, np.ndarray] = {}


def ewma(x: np.ndarray, start: float, lam: float) -> np.ndarray:
    """z_t = (1 - lam) z_{t-1} + lam x_t from z_0 = start, vectorised in chunks of 256."""
    a = 1.0 - lam
    powers = _POWERS.get(lam)
    if powers is None:
        powers = _POWERS[lam] = a ** np.arange(1, _EWMA_CHUNK + 1)
    out = np.empty(len(x))
    z = start
    for lo in range(0, len(x), _EWMA_CHUNK):
        chunk = x[lo : lo + _EWMA_CHUNK]
        p = powers[: len(chunk)]
        out[lo : lo + len(chunk)] = p * (z + lam * np.cumsum(chunk / p))
        z = out[lo + len(chunk) - 1]
    return out


def cusum(d: np.ndarray, start: np.ndarray) -> np.ndarray:
    """S_t = max(0, S_{t-1} + d_t) from S_0 = start, along the last axis (Lindley's recursion)."""
    c = np.cumsum(d, axis=-1)
    return c - np.minimum(np.minimum.accumulate(c, axis=-1), -np.asarray(start)[..., None])


_ARANGES: dict[int, np.ndarray] = {}


def _arange(n: int) -> np.ndarray:
    r = _ARANGES.get(n)
    if r is None:
        r = _ARANGES[n] = np.arange(n)
        r.flags.writeable = False
    return r


def score(state: LaneState, spec: Spec, th: Thresholds, x: np.ndarray) -> list[Change]:
    """Run every detector over one message's readings x (3, n) of one line; update its state.

    Returns the alarms that opened or closed, in reading order.
    """
    n = x.shape[1]
    if state.sku != spec.sku:  # a new SKU on the line: its drift statistics start over
        state.sku = spec.sku
        state.cusum[:] = 0.0
        state.ewma = spec.target
    idx = _arange(n)
    cond = np.empty((len(ROWS), n), dtype=bool)
    np.logical_or(x < spec.lo[:, None], x > spec.hi[:, None], out=cond[0:3])
    prev = np.empty_like(x)
    prev[:, 0] = state.last
    prev[:, 1:] = x[:, :-1]
    step = np.abs(x - prev)
    np.greater(step, spec.roc[:, None], out=cond[3:6])  # NaN (no previous) compares False
    same = x == prev
    if same.any():  # run lengths of equal values (a float sensor rarely repeats: usually skipped)
        last_break = np.maximum.accumulate(np.where(same, -1, idx), axis=1)
        run = np.where(last_break >= 0, idx - last_break + 1, state.run[:, None] + idx + 1)
        np.greater_equal(run, th.stuck_after, out=cond[6:9])
        state.run = run[:, -1].copy()
    else:
        cond[6:9] = False
        state.run = np.ones(3, dtype=np.int64)
    z = np.clip((x[0] - spec.target) / spec.sigma, -th.drift_clip, th.drift_clip)
    d = np.empty((2, n))  # the two CUSUM sides at once: high on z - k, low on -z - k
    np.subtract(z, th.cusum_k, out=d[0])
    np.subtract(-th.cusum_k, z, out=d[1])
    s = cusum(d, state.cusum)
    np.greater(s, th.cusum_h, out=cond[CUSUM_HIGH : CUSUM_LOW + 1])
    e = ewma(z, (state.ewma - spec.target) / spec.sigma, th.ewma_lambda)  # in sigma from target
    np.greater(np.abs(e), th.ewma_limit, out=cond[EWMA_ROW])

    state.last = x[:, -1].copy()
    state.cusum = np.minimum(s[:, -1], th.cusum_cap)
    state.ewma = spec.target + float(e[-1]) * spec.sigma
    state.scored += n

    was_open = state.since < th.clear_after
    if not was_open.any() and not cond.any():
        return []
    last_true = np.maximum.accumulate(np.where(cond, idx, NEVER), axis=1)
    carried = np.where(was_open, -1 - state.since, NEVER)
    last_true = np.maximum(last_true, carried[:, None])
    is_open = (idx - last_true) < th.clear_after
    before = np.empty_like(is_open)
    before[:, 0] = was_open
    before[:, 1:] = is_open[:, :-1]
    state.since = n - 1 - last_true[:, -1]
    changes = []
    for opened, mask in ((True, is_open & ~before), (False, ~is_open & before)):
        for row, i in zip(*np.nonzero(mask), strict=True):
            changes.append(_change(int(row), int(i), opened, x, prev, s, e, spec, th))
    changes.sort(key=lambda c: (c.index, not c.opened))
    return changes


def _change(
    row: int,
    i: int,
    opened: bool,
    x: np.ndarray,
    prev: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
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
        return Change(
            i, row, opened, value, float(spec.roc[sensor]), "high" if value > prev[sensor, i] else "low"
        )
    if detector == "stuck":
        return Change(i, row, opened, value, float(th.stuck_after), None)
    if row == CUSUM_HIGH:
        return Change(i, row, opened, float(s[0, i]), th.cusum_h, "high")
    if row == CUSUM_LOW:
        return Change(i, row, opened, float(s[1, i]), th.cusum_h, "low")
    ewma_value = spec.target + float(e[i]) * spec.sigma
    high = ewma_value > spec.target
    limit = spec.target + (1 if high else -1) * th.ewma_limit * spec.sigma
    return Change(i, row, opened, ewma_value, limit, "high" if high else "low")
