"""Rodinia Needleman–Wunsch and HotSpot: vectorised kernels against the cell-by-cell loops,
hand-computed cases and the physics they model."""

from __future__ import annotations

import numpy as np
import pytest

from mcc.compute import rodinia
from mcc.errors import ComputeError


def test_blosum62_is_the_symmetric_ncbi_table() -> None:
    b = rodinia.BLOSUM62
    assert b.shape == (24, 24) and b.dtype == np.int32
    np.testing.assert_array_equal(b, b.T)
    # A-A 4, W-W 11 (the largest), C-C 9, '*' against anything else -4.
    assert (b[0, 0], b[17, 17], b[4, 4]) == (4, 11, 9)
    assert b.max() == 11 and (b[23, :23] == -4).all()


def test_nw_by_hand_on_two_short_sequences() -> None:
    # A R vs A: best is A-A (4) then a gap (-10): -6.
    ref = rodinia.nw_reference_matrix(np.array([0, 1]), np.array([0]))
    score = rodinia.needleman_wunsch(ref, penalty=10)
    np.testing.assert_array_equal(score, [[0, -10], [-10, 4], [-20, -6]])


@pytest.mark.parametrize("shape", [(1, 1), (1, 6), (6, 1), (2, 2), (9, 30), (30, 9), (33, 33)])
def test_nw_wavefront_equals_the_double_loop(shape: tuple[int, int]) -> None:
    ref = np.random.default_rng(sum(shape)).integers(-4, 12, size=shape).astype(np.int32)
    for penalty in (0, 3, 10):
        np.testing.assert_array_equal(
            rodinia.needleman_wunsch(ref, penalty=penalty),
            rodinia.needleman_wunsch_reference(ref, penalty=penalty),
        )


def test_nw_inputs_are_rodinia_shaped_and_seeded() -> None:
    ref = rodinia.nw_inputs(64, seed=3)
    assert ref.shape == (65, 65) and ref.dtype == np.int32
    assert (ref[0] == 0).all() and (ref[:, 0] == 0).all()
    np.testing.assert_array_equal(ref, rodinia.nw_inputs(64, seed=3))
    assert not np.array_equal(ref, rodinia.nw_inputs(64, seed=4))
    score = rodinia.needleman_wunsch(ref)
    np.testing.assert_array_equal(score[:, 0], -10 * np.arange(65))


def test_nw_refuses_bad_input_with_the_fix() -> None:
    with pytest.raises(ComputeError, match="reference must hold integers"):
        rodinia.needleman_wunsch(np.zeros((3, 3)))
    with pytest.raises(ComputeError, match=r"reference must be a 2-D .* got shape \(3,\)"):
        rodinia.needleman_wunsch(np.zeros(3, dtype=np.int32))
    with pytest.raises(ComputeError, match="penalty=-1 must be an integer >= 0"):
        rodinia.needleman_wunsch(np.zeros((3, 3), dtype=np.int32), penalty=-1)
    with pytest.raises(ComputeError, match=r"residue indices outside 0..23"):
        rodinia.nw_reference_matrix(np.array([0, 24]), np.array([1]))


def test_hotspot_coefficients_are_rodinia_s_for_512() -> None:
    co = rodinia.hotspot_coefficients(512, 512)
    # Rx = Ry = 10 and Rz = 5120 K/W, step/Cap = 0.3413 for the 16 mm chip on a 512 grid.
    assert (co.rx_1, co.ry_1) == pytest.approx((0.1, 0.1))
    assert co.rz_1 == pytest.approx(1 / 5120)
    assert co.step_div_cap == pytest.approx(0.34133, rel=1e-4)
    assert co.ambient == 80.0


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (7, 1), (2, 2), (11, 17)])
def test_hotspot_float64_equals_the_cell_loop(shape: tuple[int, int]) -> None:
    temp, power = rodinia.hotspot_inputs(*shape, seed=1, dtype=np.float64)
    np.testing.assert_allclose(
        rodinia.hotspot(temp, power, iterations=15),
        rodinia.hotspot_reference(temp, power, iterations=15),
        rtol=1e-13,
    )


def test_hotspot_float32_stays_close_to_float64_and_keeps_its_dtype() -> None:
    temp, power = rodinia.hotspot_inputs(40, seed=2)
    before = temp.copy()
    out = rodinia.hotspot(temp, power, iterations=100)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(temp, before)  # the input is not modified
    np.testing.assert_allclose(
        out, rodinia.hotspot_reference(temp, power, iterations=100), rtol=1e-5
    )


def test_hotspot_physics_equilibrium_and_heating() -> None:
    ambient = np.full((8, 8), rodinia.HOTSPOT_AMBIENT_K)
    # At ambient temperature with no power nothing changes.
    np.testing.assert_array_equal(
        rodinia.hotspot(ambient, np.zeros((8, 8)), iterations=50), ambient
    )
    # A powered cell heats up, and diffusion spreads the heat to its neighbours.
    start = np.full((65, 65), rodinia.HOTSPOT_AMBIENT_K)
    power = np.zeros((65, 65))
    power[32, 32] = 1.0
    out = rodinia.hotspot(start, power, iterations=50)
    assert out[32, 32] > out[32, 33] > out[32, 34] > rodinia.HOTSPOT_AMBIENT_K
    np.testing.assert_allclose(out, out.T)  # symmetric source, symmetric field


def test_hotspot_refuses_bad_input() -> None:
    t, p = rodinia.hotspot_inputs(4)
    with pytest.raises(ComputeError, match=r"power has shape \(4, 3\) but temp has \(4, 4\)"):
        rodinia.hotspot(t, p[:, :3])
    with pytest.raises(ComputeError, match="temp must be float32 or float64"):
        rodinia.hotspot(t.astype(np.int32), p)
    with pytest.raises(ComputeError, match="iterations=-2 must be >= 0"):
        rodinia.hotspot(t, p, iterations=-2)
    bad = t.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ComputeError, match="temp has 1 NaN/inf"):
        rodinia.hotspot(bad, p)
