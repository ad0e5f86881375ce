"""Two reference kernels from the Rodinia benchmark suite, vectorised for NumPy and CuPy.

The remote-GPU papers measure their API overhead on Rodinia programs; these two bracket the
range: **Needleman–Wunsch** (``nw``) moves two ``(L+1)²`` integer matrices for little arithmetic
(memory-copy dominated), **HotSpot** moves three ``rows × cols`` float grids once and then runs
many stencil iterations on them (compute dominated).

* `needleman_wunsch` fills the global-alignment score matrix along anti-diagonals (a wavefront:
  every cell of one anti-diagonal depends only on the two before it), one vector step per
  anti-diagonal on strided views of the flat matrix. Rodinia's scoring: ``reference`` holds the
  BLOSUM62 substitution score of each pair of residues, ``penalty`` is the linear gap cost (10).
* `hotspot` is Rodinia's transient thermal simulation of a chip: one explicit step of the heat
  equation per iteration with Rodinia's constants (`hotspot_coefficients`); a cell on the edge
  uses itself for its missing neighbours, as Rodinia's kernels clamp indices.

`needleman_wunsch_reference` and `hotspot_reference` are straightforward cell-by-cell loops (the
Rodinia OpenMP code, in Python) that the tests check the vectorised kernels against. Inputs come
from seeded generators (`nw_inputs`, `hotspot_inputs`), not from Rodinia's data files.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from mcc.compute.backend import array_module, require_finite
from mcc.compute.limits import check_budget
from mcc.errors import ComputeError

__all__ = [
    "BLOSUM62",
    "HOTSPOT_AMBIENT_K",
    "NW_PENALTY",
    "HotspotCoefficients",
    "hotspot",
    "hotspot_coefficients",
    "hotspot_inputs",
    "hotspot_reference",
    "needleman_wunsch",
    "needleman_wunsch_reference",
    "nw_inputs",
    "nw_reference_matrix",
]

#: Rodinia's gap penalty (``nw`` command line default).
NW_PENALTY = 10

# BLOSUM62 in the NCBI residue order A R N D C Q E G H I L K M F P S T W Y V B Z X * (the table
# Rodinia's needle.cu carries); a test checks that it is symmetric.
_BLOSUM62_ROWS = """
 4 -1 -2 -2  0 -1 -1  0 -2 -1 -1 -1 -1 -2 -1  1  0 -3 -2  0 -2 -1  0 -4
-1  5  0 -2 -3  1  0 -2  0 -3 -2  2 -1 -3 -2 -1 -1 -3 -2 -3 -1  0 -1 -4
-2  0  6  1 -3  0  0  0  1 -3 -3  0 -2 -3 -2  1  0 -4 -2 -3  3  0 -1 -4
-2 -2  1  6 -3  0  2 -1 -1 -3 -4 -1 -3 -3 -1  0 -1 -4 -3 -3  4  1 -1 -4
 0 -3 -3 -3  9 -3 -4 -3 -3 -1 -1 -3 -1 -2 -3 -1 -1 -2 -2 -1 -3 -3 -2 -4
-1  1  0  0 -3  5  2 -2  0 -3 -2  1  0 -3 -1  0 -1 -2 -1 -2  0  3 -1 -4
-1  0  0  2 -4  2  5 -2  0 -3 -3  1 -2 -3 -1  0 -1 -3 -2 -2  1  4 -1 -4
 0 -2  0 -1 -3 -2 -2  6 -2 -4 -4 -2 -3 -3 -2  0 -2 -2 -3 -3 -1 -2 -1 -4
-2  0  1 -1 -3  0  0 -2  8 -3 -3 -1 -2 -1 -2 -1 -2 -2  2 -3  0  0 -1 -4
-1 -3 -3 -3 -1 -3 -3 -4 -3  4  2 -3  1  0 -3 -2 -1 -3 -1  3 -3 -3 -1 -4
-1 -2 -3 -4 -1 -2 -3 -4 -3  2  4 -2  2  0 -3 -2 -1 -2 -1  1 -4 -3 -1 -4
-1  2  0 -1 -3  1  1 -2 -1 -3 -2  5 -1 -3 -1  0 -1 -3 -2 -2  0  1 -1 -4
-1 -1 -2 -3 -1  0 -2 -3 -2  1  2 -1  5  0 -2 -1 -1 -1 -1  1 -3 -1 -1 -4
-2 -3 -3 -3 -2 -3 -3 -3 -1  0  0 -3  0  6 -4 -2 -2  1  3 -1 -3 -3 -1 -4
-1 -2 -2 -1 -3 -1 -1 -2 -2 -3 -3 -1 -2 -4  7 -1 -1 -4 -3 -2 -2 -1 -2 -4
 1 -1  1  0 -1  0  0  0 -1 -2 -2  0 -1 -2 -1  4  1 -3 -2 -2  0  0  0 -4
 0 -1  0 -1 -1 -1 -1 -2 -2 -1 -1 -1 -1 -2 -1  1  5 -2 -2  0 -1 -1  0 -4
-3 -3 -4 -4 -2 -2 -3 -2 -2 -3 -2 -3 -1  1 -4 -3 -2 11  2 -3 -4 -3 -2 -4
-2 -2 -2 -3 -2 -1 -2 -3  2 -1 -1 -2 -1  3 -3 -2 -2  2  7 -1 -3 -2 -1 -4
 0 -3 -3 -3 -1 -2 -2 -3 -3  3  1 -2  1 -1 -2 -2  0 -3 -1  4 -3 -2 -1 -4
-2 -1  3  4 -3  0  1 -1  0 -3 -4  0 -3 -3 -2  0 -1 -4 -3 -3  4  1 -1 -4
-1  0  0  1 -3  3  4 -2  0 -3 -3  1 -1 -3 -1  0 -1 -3 -2 -2  1  4 -1 -4
 0 -1 -1 -1 -2 -1 -1 -1 -1 -1 -1 -1 -1 -1 -2  0  0 -2 -1 -1 -1 -1 -1 -4
-4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4  1
"""
BLOSUM62: npt.NDArray[np.int32] = np.array(
    [[int(v) for v in line.split()] for line in _BLOSUM62_ROWS.strip().splitlines()],
    dtype=np.int32,
)


# ---------------------------------------------------------------------------------------------
# Needleman–Wunsch


def nw_reference_matrix(seq_a: Any, seq_b: Any) -> npt.NDArray[np.int32]:
    """Rodinia's ``reference`` matrix ``(len_a + 1, len_b + 1)`` int32 for two sequences of
    residue indices 0..23: ``BLOSUM62[a_i, b_j]`` at ``[i + 1, j + 1]``, zeros in row/column 0."""
    a = np.asarray(seq_a)
    b = np.asarray(seq_b)
    for name, s in (("seq_a", a), ("seq_b", b)):
        if s.ndim != 1 or s.dtype.kind not in "iu":
            raise ComputeError(f"{name} must be a 1-D integer array of residue indices")
        if s.size and (int(s.min()) < 0 or int(s.max()) >= BLOSUM62.shape[0]):
            raise ComputeError(f"{name} holds residue indices outside 0..{BLOSUM62.shape[0] - 1}")
    ref = np.zeros((a.size + 1, b.size + 1), dtype=np.int32)
    ref[1:, 1:] = BLOSUM62[a[:, None], b[None, :]]
    return ref


def nw_inputs(length: int, *, seed: int = 7) -> npt.NDArray[np.int32]:
    """The ``reference`` matrix ``(length + 1, length + 1)`` of two random sequences of
    ``length`` residues drawn as Rodinia does (``rand() % 10 + 1``), from ``seed``."""
    if not isinstance(length, int | np.integer) or length < 0:
        raise ComputeError(f"length={length!r} must be an integer >= 0 (residues)")
    rng = np.random.default_rng(seed)
    return nw_reference_matrix(rng.integers(1, 11, size=length), rng.integers(1, 11, size=length))


def _nw_check(reference: Any, penalty: int, xp: ModuleType) -> Any:
    ref = xp.asarray(reference)
    if ref.ndim != 2 or ref.shape[0] < 1 or ref.shape[1] < 1:
        raise ComputeError(
            f"reference must be a 2-D (len_a + 1, len_b + 1) matrix, got shape {tuple(ref.shape)}"
        )
    if ref.dtype.kind not in "iu":
        raise ComputeError(f"reference must hold integers (int32 scores), got {ref.dtype}")
    if isinstance(penalty, bool) or not isinstance(penalty, int | np.integer) or penalty < 0:
        raise ComputeError(f"penalty={penalty!r} must be an integer >= 0 (gap cost)")
    return xp.ascontiguousarray(ref, dtype=xp.int32)


def _nw_initial(rows: int, cols: int, penalty: int, xp: ModuleType) -> Any:
    score = xp.zeros((rows, cols), dtype=xp.int32)
    score[:, 0] = -penalty * xp.arange(rows, dtype=xp.int32)
    score[0, :] = -penalty * xp.arange(cols, dtype=xp.int32)
    return score


def needleman_wunsch(
    reference: Any, *, penalty: int = NW_PENALTY, xp: ModuleType | None = None
) -> Any:
    """Needleman–Wunsch score matrix ``(R + 1, C + 1)`` int32 of ``reference`` (same shape).

    ``score[i, 0] = -i·penalty``, ``score[0, j] = -j·penalty`` and, for i, j >= 1,
    ``score[i, j] = max(score[i-1, j-1] + reference[i, j], score[i, j-1] - penalty,
    score[i-1, j] - penalty)``. ``score[R, C]`` is the optimal global alignment score.
    """
    xp = xp if xp is not None else array_module(reference)
    ref = _nw_check(reference, penalty, xp)
    rows, cols = ref.shape
    score = _nw_initial(rows, cols, int(penalty), xp)
    if rows < 2 or cols < 2:
        return score
    n_r, n_c = rows - 1, cols - 1
    flat = score.reshape(-1)
    rflat = ref.reshape(-1)
    # In row-major order the cells of anti-diagonal k = i + j are `cols - 1` apart: each
    # anti-diagonal and its three neighbour sets (up-left, left, up) are strided views.
    step = cols - 1
    for k in range(2, n_r + n_c + 1):
        check_budget()  # the compute service's budget per call (no-op for local calls)
        i_lo, i_hi = max(1, k - n_c), min(n_r, k - 1)
        start, stop = i_lo * step + k, i_hi * step + k + 1
        gap = xp.maximum(flat[start - 1 : stop - 1 : step], flat[start - cols : stop - cols : step])
        gap -= penalty
        match = flat[start - cols - 1 : stop - cols - 1 : step] + rflat[start:stop:step]
        xp.maximum(match, gap, out=flat[start:stop:step])
    return score


def needleman_wunsch_reference(reference: Any, *, penalty: int = NW_PENALTY) -> np.ndarray:
    """The score matrix by the textbook double loop, cell by cell (slow: small inputs only)."""
    ref = _nw_check(np.asarray(reference), penalty, np)
    rows, cols = ref.shape
    s = _nw_initial(rows, cols, int(penalty), np).tolist()
    r = ref.tolist()
    for i in range(1, rows):
        for j in range(1, cols):
            s[i][j] = max(s[i - 1][j - 1] + r[i][j], s[i][j - 1] - penalty, s[i - 1][j] - penalty)
    return np.array(s, dtype=np.int32)


# ---------------------------------------------------------------------------------------------
# HotSpot

# Rodinia hotspot constants: maximum power density (W/m²; 300 W on 10 mm × 10 mm), required
# precision (K), silicon specific heat (J/(m³·K)) and conductivity (W/(m·K)), capacitance
# fitting factor, chip thickness, height and width (m), ambient temperature.
_MAX_PD = 3.0e6
_PRECISION = 0.001
_SPEC_HEAT_SI = 1.75e6
_K_SI = 100.0
_FACTOR_CHIP = 0.5
_T_CHIP_M = 0.0005
_CHIP_HEIGHT_M = 0.016
_CHIP_WIDTH_M = 0.016
#: Rodinia's ambient temperature (its ``amb_temp``; the model's unit is "degrees").
HOTSPOT_AMBIENT_K = 80.0


@dataclasses.dataclass(frozen=True)
class HotspotCoefficients:
    """One HotSpot step: ``t += step_div_cap · (power + (N + S - 2t)·ry_1 + (E + W - 2t)·rx_1
    + (ambient - t)·rz_1)``, from Rodinia's chip model for a ``rows × cols`` grid."""

    step_div_cap: float
    rx_1: float
    ry_1: float
    rz_1: float
    ambient: float = HOTSPOT_AMBIENT_K


def hotspot_coefficients(rows: int, cols: int) -> HotspotCoefficients:
    """Rodinia's ``Cap``, ``Rx``, ``Ry``, ``Rz`` and time step for a ``rows × cols`` grid."""
    if rows < 1 or cols < 1:
        raise ComputeError(f"grid {rows}x{cols}: rows and cols must be >= 1")
    grid_height = _CHIP_HEIGHT_M / rows
    grid_width = _CHIP_WIDTH_M / cols
    cap = _FACTOR_CHIP * _SPEC_HEAT_SI * _T_CHIP_M * grid_width * grid_height
    rx = grid_width / (2.0 * _K_SI * _T_CHIP_M * grid_height)
    ry = grid_height / (2.0 * _K_SI * _T_CHIP_M * grid_width)
    rz = _T_CHIP_M / (_K_SI * grid_height * grid_width)
    max_slope = _MAX_PD / (_FACTOR_CHIP * _T_CHIP_M * _SPEC_HEAT_SI)
    step = _PRECISION / max_slope
    return HotspotCoefficients(step / cap, 1.0 / rx, 1.0 / ry, 1.0 / rz)


def hotspot_inputs(
    rows: int, cols: int | None = None, *, seed: int = 7, dtype: Any = np.float32
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded ``temp`` (323–343 K) and ``power`` (0–1 mW per cell) grids ``(rows, cols)``."""
    cols = rows if cols is None else cols
    if rows < 1 or cols < 1:
        raise ComputeError(f"grid {rows}x{cols}: rows and cols must be >= 1")
    rng = np.random.default_rng(seed)
    temp = (323.0 + 20.0 * rng.random((rows, cols))).astype(dtype)
    power = (1e-3 * rng.random((rows, cols))).astype(dtype)
    return temp, power


def _hotspot_check(temp: Any, power: Any, iterations: int, xp: ModuleType) -> tuple[Any, Any]:
    t = xp.asarray(temp)
    p = xp.asarray(power)
    if t.ndim != 2 or t.shape[0] < 1 or t.shape[1] < 1:
        raise ComputeError(f"temp must be a 2-D (rows, cols) grid, got shape {tuple(t.shape)}")
    if p.shape != t.shape:
        raise ComputeError(
            f"power has shape {tuple(p.shape)} but temp has {tuple(t.shape)}; use one grid"
        )
    if t.dtype not in (np.float32, np.float64):
        raise ComputeError(f"temp must be float32 or float64, got {t.dtype}")
    if isinstance(iterations, bool) or not isinstance(iterations, int | np.integer):
        raise ComputeError(f"iterations={iterations!r} must be an integer >= 0")
    if iterations < 0:
        raise ComputeError(f"iterations={iterations!r} must be >= 0")
    require_finite("temp", t, xp=xp)
    require_finite("power", p, xp=xp)
    return t, p.astype(t.dtype, copy=False)


def _neighbour_sum(t: Any, out: Any, axis: int, xp: ModuleType) -> None:
    """``out`` = the sum of the two neighbours of every cell along ``axis``, edges clamped."""
    a = t if axis == 0 else t.T
    o = out if axis == 0 else out.T
    n = a.shape[0]
    if n == 1:
        xp.multiply(a, 2, out=o)
        return
    xp.add(a[:-2], a[2:], out=o[1:-1])
    xp.add(a[0], a[1], out=o[0])
    xp.add(a[-2], a[-1], out=o[-1])


def hotspot(temp: Any, power: Any, *, iterations: int = 60, xp: ModuleType | None = None) -> Any:
    """``temp`` after ``iterations`` HotSpot steps driven by ``power`` (same shape and dtype:
    float32 as Rodinia, or float64). The input arrays are not modified."""
    xp = xp if xp is not None else array_module(temp, power)
    t0, p = _hotspot_check(temp, power, iterations, xp)
    co = hotspot_coefficients(*t0.shape)
    t = xp.array(t0, copy=True)
    ns = xp.empty_like(t)
    ew = xp.empty_like(t)
    buf = xp.empty_like(t)
    for _ in range(int(iterations)):
        check_budget()
        _neighbour_sum(t, ns, 0, xp)
        _neighbour_sum(t, ew, 1, xp)
        xp.multiply(t, 2, out=buf)
        ns -= buf
        ns *= co.ry_1
        ew -= buf
        ew *= co.rx_1
        ns += ew
        ns += p
        xp.subtract(co.ambient, t, out=buf)
        buf *= co.rz_1
        ns += buf
        ns *= co.step_div_cap
        t += ns
    return t


def hotspot_reference(temp: Any, power: Any, *, iterations: int = 60) -> np.ndarray:
    """HotSpot by the cell-by-cell loop of Rodinia's OpenMP version, in float64 (slow)."""
    t0, p0 = _hotspot_check(np.asarray(temp), np.asarray(power), iterations, np)
    rows, cols = t0.shape
    co = hotspot_coefficients(rows, cols)
    t = t0.astype(np.float64).tolist()
    p = p0.astype(np.float64).tolist()
    for _ in range(int(iterations)):
        new = [[0.0] * cols for _ in range(rows)]
        for r in range(rows):
            up, down = t[max(r - 1, 0)], t[min(r + 1, rows - 1)]
            row = t[r]
            for c in range(cols):
                here = row[c]
                delta = co.step_div_cap * (
                    p[r][c]
                    + (down[c] + up[c] - 2.0 * here) * co.ry_1
                    + (row[min(c + 1, cols - 1)] + row[max(c - 1, 0)] - 2.0 * here) * co.rx_1
                    + (co.ambient - here) * co.rz_1
                )
                new[r][c] = here + delta
        t = new
    return np.array(t, dtype=np.float64)
