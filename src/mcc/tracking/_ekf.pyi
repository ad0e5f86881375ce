# Type stub of the C extension mcc.tracking._ekf (src/mcc/tracking/_ekf.c).
import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

def gate(
    x: F64,
    P: F64,
    n_models: int,
    rows: I64,
    cols: I64,
    z: F64,
    R: F64,
    sensor_e: float,
    sensor_n: float,
    mu: F64 | None,
    d2: F64,
    logdet: F64,
    ll: F64 | None,
    /,
) -> int: ...
def update(
    x: F64,
    P: F64,
    n_models: int,
    rows: I64,
    cols: I64,
    z: F64,
    R: F64,
    sensor_e: float,
    sensor_n: float,
    x_out: F64,
    P_out: F64,
    ll_out: F64,
    mu: F64 = ...,
    mix: F64 = ...,
    mu_post: F64 = ...,
    /,
) -> int: ...
def pda_mix(
    x: F64,
    P: F64,
    mu: F64,
    n_models: int,
    tracks: I64,
    at: I64,
    x_pair: F64,
    P_pair: F64,
    ll: F64,
    beta: F64,
    beta0: F64,
    x_out: F64,
    P_out: F64,
    mu_out: F64,
    /,
) -> None: ...
def imm_predict(
    x: F64,
    P: F64,
    mu: F64,
    n_models: int,
    pi: F64,
    floor: float,
    FT: F64,
    FFT: F64,
    Q: F64,
    block: int,
    x_out: F64,
    P_out: F64,
    mu_out: F64,
    /,
) -> None: ...
def grid_pairs(
    track_pos: F64,
    meas_pos: F64,
    radius: F64,
    rows: I64,
    tkey: I64,
    offsets: I64,
    mask: int,
    count: I64,
    start: I64,
    order: I64,
    ti_out: I64,
    mj_out: I64,
    /,
) -> int: ...
