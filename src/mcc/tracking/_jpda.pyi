# Type stub of the C extension mcc.tracking._jpda (src/mcc/tracking/_jpda.c).
import numpy as np
import numpy.typing as npt

def marginals(
    t_loc: npt.NDArray[np.int64],
    m_loc: npt.NDArray[np.int64],
    log_g: npt.NDArray[np.float64],
    n_tracks: int,
    n_meas: int,
    log_w0: float,
    star: bool,
    max_cluster: int,
    max_events: float,
    codes: npt.NDArray[np.uint64],
    beta: npt.NDArray[np.float64],
    beta0: npt.NDArray[np.float64],
    rank_g: npt.NDArray[np.float64] | None = None,
    /,
) -> tuple[int, int]: ...
def unique_inverse(
    x: npt.NDArray[np.int64],
    uniq: npt.NDArray[np.int64],
    inverse: npt.NDArray[np.int64],
    /,
) -> int: ...
def components(
    t: npt.NDArray[np.int64],
    m: npt.NDArray[np.int64],
    n_t: int,
    n_m: int,
    label: npt.NDArray[np.int64],
    /,
) -> None: ...
