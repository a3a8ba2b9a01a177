"""The line detectors (no NATS): vectorised equals reading by reading, calibrated, one alert per episode."""

from __future__ import annotations

import numpy as np
import pytest

from dayclose.stream.detectors import (
    CUSUM_HIGH,
    CUSUM_LOW,
    EWMA_ROW,
    ROWS,
    LaneState,
    Reference,
    Thresholds,
    score,
)

REF = Reference.from_seeds()
TH = Thresholds()
SPEC = REF.specs["PILS-330-BTL"]
WIDTH = SPEC.hi - SPEC.lo


def in_control(rng: np.random.Generator, n: int, spec=SPEC, share: float = 1 / 12) -> np.ndarray:
    mid = (spec.lo + spec.hi) / 2
    return mid[:, None] + rng.normal(0, 1, (3, n)) * ((spec.hi - spec.lo) * share)[:, None]


def run(x: np.ndarray, sizes: list[int], spec=SPEC) -> tuple[list[tuple[int, int, bool]], LaneState]:
    """Score x in messages of the given sizes; the changes as (reading index, row, opened)."""
    state, out, at = LaneState(), [], 0
    for size in sizes:
        for c in score(state, spec, TH, x[:, at : at + size]):
            out.append((at + c.index, c.row, c.opened))
        at += size
    return out, state


def reference(x: np.ndarray, sizes: list[int], spec=SPEC) -> tuple[list[tuple[int, int, bool]], dict]:
    """The same detectors, one reading at a time in plain Python (the definition)."""
    last = [float("nan")] * 3
    run_len = [0, 0, 0]
    s_hi = s_lo = 0.0
    z_ewma = spec.target
    since = [10**12] * len(ROWS)
    out = []
    t = 0
    for size in sizes:
        for _ in range(size):
            v = x[:, t]
            cond = []
            cond += [bool(v[k] < spec.lo[k] or v[k] > spec.hi[k]) for k in range(3)]
            cond += [bool(abs(v[k] - last[k]) > spec.roc[k]) for k in range(3)]
            run_len = [run_len[k] + 1 if v[k] == last[k] else 1 for k in range(3)]
            cond += [run_len[k] >= TH.stuck_after for k in range(3)]
            z = min(max((v[0] - spec.target) / spec.sigma, -TH.drift_clip), TH.drift_clip)
            s_hi = max(0.0, s_hi + z - TH.cusum_k)
            s_lo = max(0.0, s_lo - z - TH.cusum_k)
            z_ewma = (1 - TH.ewma_lambda) * z_ewma + TH.ewma_lambda * (spec.target + z * spec.sigma)
            cond += [
                s_hi > TH.cusum_h,
                s_lo > TH.cusum_h,
                abs(z_ewma - spec.target) > TH.ewma_limit * spec.sigma,
            ]
            for row, c in enumerate(cond):
                was = since[row] < TH.clear_after
                since[row] = 0 if c else since[row] + 1
                now = since[row] < TH.clear_after
                if now != was:
                    out.append((t, row, now))
            last = [float(v[k]) for k in range(3)]
            t += 1
        s_hi, s_lo = min(s_hi, TH.cusum_cap), min(s_lo, TH.cusum_cap)
    return out, {"cusum": (s_hi, s_lo), "ewma": z_ewma, "run": run_len}


def scenario(rng: np.random.Generator, n: int = 6000) -> np.ndarray:
    """In control, then a creeping drift, a stuck sensor, spikes and a step."""
    x = in_control(rng, n)
    x[0, 1000:2500] += np.linspace(0, 1.5, 1500) * (SPEC.hi[0] - SPEC.target)
    x[2, 3000:3100] = 3.25  # stuck temperature
    x[0, 3500] = 9999.9
    x[1, 3600] = -999.0
    x[0, 4000:4200] -= 0.8 * (SPEC.target - SPEC.lo[0])  # a step low
    return x.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("message", [1, 7, 100, 1000])
def test_vectorised_detectors_equal_the_reading_by_reading_definition(message: int) -> None:
    rng = np.random.default_rng(message)
    x = scenario(rng)
    sizes = [message] * (x.shape[1] // message) + ([x.shape[1] % message] if x.shape[1] % message else [])
    got, state = run(x, sizes)
    want, end = reference(x, sizes)
    assert got == want
    assert len(got) >= 10  # the scenario does trip the detectors
    assert state.cusum == pytest.approx(end["cusum"])
    assert state.ewma == pytest.approx(end["ewma"])
    assert state.run.tolist() == end["run"]


def test_in_control_lines_raise_no_alert() -> None:
    """Cp 2 lines (the simulator's), every SKU: nothing at all; Cp 1.33 lines (sigma as assumed):
    out-of-spec units happen, but the drift statistics stay silent."""
    rng = np.random.default_rng(7)
    for spec in REF.specs.values():
        got, _ = run(in_control(rng, 200_000, spec), [100] * 2000, spec)
        assert got == [], spec.sku
    got, _ = run(in_control(rng, 1_000_000, SPEC, 1 / 8), [100] * 10_000)
    assert [c for c in got if c[1] in (CUSUM_HIGH, CUSUM_LOW, EWMA_ROW)] == []
    assert any(ROWS[c[1]][0] == "out_of_spec" for c in got)


def test_a_creeping_drift_alarms_before_its_first_out_of_spec_reading() -> None:
    rng = np.random.default_rng(3)
    x = in_control(rng, 4000)
    x[0, 1000:3000] += np.linspace(0, 1.5, 2000) * (SPEC.hi[0] - SPEC.target)
    got, _ = run(x, [100] * 40)
    first_out = int(np.nonzero(x[0] > SPEC.hi[0])[0][0])
    cusum_open = next(i for i, row, opened in got if row == CUSUM_HIGH and opened)
    ewma_open = next(i for i, row, opened in got if row == EWMA_ROW and opened)
    assert 1000 < cusum_open < first_out
    assert cusum_open < ewma_open
    # back on target at 3000: the drift alarms close, once each
    assert [(row, opened) for i, row, opened in got if row == CUSUM_HIGH] == [
        (CUSUM_HIGH, True),
        (CUSUM_HIGH, False),
    ]
    assert next(i for i, row, opened in got if row == CUSUM_HIGH and not opened) < 3000 + 100


def test_a_spike_is_flagged_once_and_is_not_a_drift() -> None:
    rng = np.random.default_rng(4)
    x = in_control(rng, 300)
    x[0, 120] = 9999.9
    got, _ = run(x, [100] * 3)
    assert [(ROWS[row][0], opened, i) for i, row, opened in got] == [
        ("out_of_spec", True, 120),
        ("rate_of_change", True, 120),
        ("out_of_spec", False, 120 + TH.clear_after),
        ("rate_of_change", False, 121 + TH.clear_after),
    ]


def test_a_stuck_sensor_opens_at_the_30th_repeat_and_closes_after_it_moves() -> None:
    rng = np.random.default_rng(5)
    x = in_control(rng, 400)
    x[2, 100:200] = 3.3
    got, _ = run(x, [64] * 6 + [16])
    assert [(ROWS[row][0], ROWS[row][1], opened, i) for i, row, opened in got] == [
        ("stuck", 2, True, 100 + TH.stuck_after - 1),
        ("stuck", 2, False, 199 + TH.clear_after),
    ]


def test_state_survives_a_checkpoint() -> None:
    rng = np.random.default_rng(6)
    x = scenario(rng)
    whole, _ = run(x, [100] * 60)
    state, out = LaneState(), []
    for k in range(60):
        if k == 31:  # a restart from the checkpoint in the middle of the stuck sensor and the drift
            state = LaneState.from_dict(state.to_dict())
        out += [
            (k * 100 + c.index, c.row, c.opened)
            for c in score(state, SPEC, TH, x[:, k * 100 : k * 100 + 100])
        ]
    assert out == whole
