/* mcc.tracking._ekf: the tracker's 2-D range/azimuth filter steps over a whole scan in one call
 * each: the gate's distances and the IMM's model mixture (`PolarEKFUpdater.pair_distance`, for
 * `Chi2Gater.gate` and `IMMPredictor.model_gate`), the EKF update (`pair_update`, `update`,
 * `pair_update_mix`), JPDA's PDA mixture (`jpda.pda_mix`), the IMM's mixing and one-step
 * prediction (`IMMPredictor.predict`), its combined estimate (`kalman.imm_combine`) and the
 * spatial grid's candidate pairs (`gaters.candidate_pairs`). The NumPy code of each is the
 * reference, the fallback where the extension is not built, and what 3-D, range-rate and
 * Cartesian scans use.
 *
 * Written by hand because the arrays are small (10-300 tracks x 7 IMM models, a few to a few
 * hundred gated pairs a scan, 4 x 4 matrices) and NumPy's time went to the fixed cost of its
 * ~150 array calls per scan in these steps, not to arithmetic; at 1000 targets in wide bearing
 * noise, to its ten passes over 10^5 grid candidates. Measured 2026-11-27, the NumPy paths and
 * the kernel alternating 5 times in one process (AMD EPYC, 2 shared cores, load 2-3), CPU
 * median of `MultiTargetTracker.step` per scan: `formation` training draws 1.23 -> 0.64 ms,
 * `straight` 0.89 -> 0.50 ms; 1000 `straight` targets 5.9 -> 3.2 ms at 0.16 deg of bearing
 * noise, 10.2 -> 4.6 at 0.31 deg, 19.3 -> 6.9 at 0.96 deg. On the `formation` report draws
 * (wall, the bench's `run_mcc`) 1.13 -> 0.60 ms a scan against Stone Soup's 66.9 ms: 59x -> 112x.
 *
 * The arithmetic is the reference's, in the same order, NaN propagated as NumPy's maximum and
 * argmin do. Built with -ffp-contract=off: no multiply-add is fused but the explicit fma() that
 * reproduce NumPy's matrix products (OpenBLAS's kernels fuse them; see gemm_dot). atan2, exp and
 * log are the C library's where NumPy may use its own SIMD loops, so a result may differ in its
 * last bit or two; on the 28 training draws the tracker's output is the same as with the NumPy
 * paths (track ids and statuses at every scan, GOSPA, id switches; positions within 3e-14 and
 * velocities 9e-13 relative).
 *
 *   gate(x, P, n_models, rows, cols, z, R, sensor_e, sensor_n, mu, d2, logdet, ll) -> bad
 *
 * x (float64, (N, [M,] 4)), P ((N, [M,] 4, 4)): the predicted states [e n ve vn] and
 * covariances of N tracks of M = n_models models, any strides over tracks and models, each state
 * and matrix contiguous; rows, cols (int64, K): each pair's track and detection; z (float64,
 * D*2): the detections' range and azimuth; R (float64, 4): their covariance; sensor_e,
 * sensor_n: the radar's position. mu None: writes each pair's and model's squared Mahalanobis
 * distance and ln|S| into d2 and logdet (K*M); mu (float64, N*M): writes, per pair, the smallest
 * d2 over the models, the ln|S| of that model (np.argmin's) and ln sum_m mu_m N(y_m; 0, S_m)
 * into d2, logdet and ll (K).
 *
 *   update(x, P, n_models, rows, cols, z, R, sensor_e, sensor_n, x_out, P_out, ll_out
 *          [, mu, mix, mu_post]) -> bad
 *
 * The EKF update of each pair's track (every model) with its detection: posterior states
 * (K*M*4), covariances (K*M*16) and log-likelihoods (K*M). The linearisation, gain and
 * posterior covariance are computed once per track and model, as the reference does. With
 * mu (N*M), also each pair's ln sum_m mu_m N_m into mix (K) and the models' posterior
 * probabilities into mu_post (K*M).
 *
 * Both return the number of (track, model) whose innovation covariance has no positive
 * determinant (NaN included): the caller raises ComputeError, as the reference does.
 *
 *   pda_mix(x, P, mu, n_models, tracks, at, x_pair, P_pair, ll, beta, beta0, x_out, P_out,
 *           mu_out)
 *   imm_predict(x, P, mu, n_models, pi, floor, FT, FFT, Q, block, x_out, P_out, mu_out)
 *   imm_combine(x, P, mu, n_models, x_out, P_out)
 *   grid_pairs(track_pos, meas_pos, radius, rows, tkey, offsets, mask, count, start, order,
 *              ti_out, mj_out) -> pairs
 *
 * described where they are defined. Indices are checked (IndexError), shapes too (TypeError,
 * ValueError); the GIL is released while they compute.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LOG_2PI 1.8378770664093453 /* math.log(2 * math.pi) */

/* The fused multiply-adds that reproduce NumPy's matrix products (fma() below) are one
 * instruction where the CPU has FMA, a slow exact library call where it has not: the functions
 * that use them are compiled twice, for FMA and without, and chosen when the module loads.
 * (Built with -ffp-contract=off: no other multiply-add is fused.) */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HOT static inline __attribute__((always_inline))
#define WITH_FMA static __attribute__((target("fma"), noinline))
#define FMA_DISPATCH 1
#else
#define HOT static inline
#define WITH_FMA static
#define FMA_DISPATCH 0
#endif
static int has_fma = 0;

/* np.sum over the model axis of a (K, M) array: in order, from the first item (measured) */
static inline double
row_sum(const double *a, Py_ssize_t n)
{
    double s = a[0];
    for (Py_ssize_t m = 1; m < n; m++)
        s += a[m];
    return s;
}

typedef struct {
    const char *x, *P; /* strided over tracks and models, each state and covariance contiguous */
    const double *z, *R, *mu;
    const int64_t *rows, *cols;
    Py_ssize_t n_tracks, n_models, n_pairs, n_meas;
    Py_ssize_t x_st, x_sm, P_st, P_sm; /* byte strides of the track and model axes */
    double se, sn;
} Problem;

static inline const double *
state(const Problem *pb, Py_ssize_t i, Py_ssize_t m)
{
    return (const double *)(pb->x + i * pb->x_st + m * pb->x_sm);
}

static inline const double *
covariance(const Problem *pb, Py_ssize_t i, Py_ssize_t m)
{
    return (const double *)(pb->P + i * pb->P_st + m * pb->P_sm);
}

/* np.maximum(v, 1e-12): NaN kept */
static inline double
floor_eps(double v)
{
    return (v > 1e-12 || isnan(v)) ? v : 1e-12;
}

/* kalman.wrap_angle: np.mod(a + pi, 2 pi) - pi, with NumPy's floor remainder */
static inline double
wrap_angle(double a)
{
    const double b = 2.0 * M_PI;
    double mod = fmod(a + M_PI, b);
    if (mod != 0.0) {
        if (mod < 0.0)
            mod += b;
    }
    else
        mod = copysign(0.0, b);
    return mod - M_PI;
}

/* updaters._polar_2d of one state: range, azimuth and the position columns of the Jacobian */
static inline void
polar_2d(const double *x, double se, double sn, double *r, double *az, double Hp[4])
{
    double e = x[0] - se, n = x[1] - sn;
    double rho2 = floor_eps(e * e + n * n);
    double rr = sqrt(rho2);
    Hp[0] = e / rr;
    Hp[1] = n / rr;
    Hp[2] = n / rho2;
    Hp[3] = -e / rho2;
    *r = rr;
    *az = atan2(e, n);
}

/* Per (track, model) for the gate: range, azimuth and the symmetric H P H^T + R (s00 s01 s11) */
enum { G_R, G_AZ, G_S00, G_S01, G_S11, G_SIZE };

HOT void
gate_linearise(const Problem *pb, Py_ssize_t i, Py_ssize_t m, double *out)
{
    double Hp[4];
    const double *P = covariance(pb, i, m), *R = pb->R;
    polar_2d(state(pb, i, m), pb->se, pb->sn, &out[G_R], &out[G_AZ], Hp);
    /* Hp @ P[:2, :2] @ Hp^T, then _sym(. + R). NumPy's matmul of 2 x 2 stacks (OpenBLAS's
     * kernel) gives (A B)_ij = fma(A_i1, B_1j, A_i0 B_0j) on the x86-64 machines with FMA we
     * run on (measured: every product equal to the bit); fma() is that everywhere. */
    double A00 = fma(Hp[1], P[4], Hp[0] * P[0]), A01 = fma(Hp[1], P[5], Hp[0] * P[1]);
    double A10 = fma(Hp[3], P[4], Hp[2] * P[0]), A11 = fma(Hp[3], P[5], Hp[2] * P[1]);
    double h00 = fma(A01, Hp[1], A00 * Hp[0]), h01 = fma(A01, Hp[3], A00 * Hp[2]);
    double h10 = fma(A11, Hp[1], A10 * Hp[0]), h11 = fma(A11, Hp[3], A10 * Hp[2]);
    double a00 = h00 + R[0], a01 = h01 + R[1], a10 = h10 + R[2], a11 = h11 + R[3];
    out[G_S00] = 0.5 * (a00 + a00);
    out[G_S01] = 0.5 * (a01 + a10);
    out[G_S11] = 0.5 * (a11 + a11);
}

/* The innovation of detection j against a linearisation: updaters._polar_residual */
static inline void
residual(const Problem *pb, int64_t j, double r, double az, double y[2])
{
    y[0] = pb->z[2 * j] - r;
    y[1] = wrap_angle(pb->z[2 * j + 1] - az);
}

/* Rows' linearisations made once each: stamp[row] is 1 + the slot of the row's cache. */
typedef struct {
    int64_t *stamp;
    double *cache;
    Py_ssize_t used;
} Cache;

static int
cache_init(Cache *c, const Problem *pb, Py_ssize_t per_model)
{
    c->used = 0;
    c->stamp = calloc((size_t)(pb->n_tracks > 0 ? pb->n_tracks : 1), sizeof(int64_t));
    Py_ssize_t slots = pb->n_pairs < pb->n_tracks ? pb->n_pairs : pb->n_tracks;
    c->cache = malloc((size_t)((slots > 0 ? slots : 1) * pb->n_models * per_model) *
                      sizeof(double));
    if (!c->stamp || !c->cache) {
        free(c->stamp);
        free(c->cache);
        return -1;
    }
    return 0;
}

static void
cache_free(Cache *c)
{
    free(c->stamp);
    free(c->cache);
}

HOT Py_ssize_t
solve_gate_body(const Problem *pb, double *d2_out, double *logdet_out, double *ll_out,
                int *nomem)
{
    Py_ssize_t M = pb->n_models, bad = 0;
    Cache c;
    if (cache_init(&c, pb, G_SIZE) < 0) {
        *nomem = 1;
        return 0;
    }
    double *a = malloc((size_t)(M > 0 ? M : 1) * 3 * sizeof(double));
    if (!a) {
        cache_free(&c);
        *nomem = 1;
        return 0;
    }
    double *dd = a + M, *ld = a + 2 * M;
    for (Py_ssize_t k = 0; k < pb->n_pairs; k++) {
        int64_t i = pb->rows[k], j = pb->cols[k];
        double *lin;
        if (c.stamp[i] == 0) {
            c.stamp[i] = ++c.used;
            lin = c.cache + (c.used - 1) * M * G_SIZE;
            for (Py_ssize_t m = 0; m < M; m++) {
                gate_linearise(pb, i, m, lin + m * G_SIZE);
                double s00 = lin[m * G_SIZE + G_S00], s01 = lin[m * G_SIZE + G_S01];
                double s11 = lin[m * G_SIZE + G_S11];
                double det = s00 * s11 - s01 * s01;
                if (!(det > 0.0))
                    bad++;
            }
        }
        else
            lin = c.cache + (c.stamp[i] - 1) * M * G_SIZE;
        for (Py_ssize_t m = 0; m < M; m++) {
            const double *g = lin + m * G_SIZE;
            double y[2];
            residual(pb, j, g[G_R], g[G_AZ], y);
            /* _inv_small (2 x 2) and the einsum "...i,...ij,...j->..." */
            double s00 = g[G_S00], s01 = g[G_S01], s11 = g[G_S11];
            double det = s00 * s11 - s01 * s01;
            double i00 = s11 / det, i01 = -s01 / det, i11 = s00 / det;
            double d2 = y[0] * i00 * y[0];
            d2 += y[0] * i01 * y[1];
            d2 += y[1] * i01 * y[0];
            d2 += y[1] * i11 * y[1];
            dd[m] = d2;
            ld[m] = log(det);
        }
        if (!pb->mu) {
            memcpy(d2_out + k * M, dd, (size_t)M * sizeof(double));
            memcpy(logdet_out + k * M, ld, (size_t)M * sizeof(double));
            continue;
        }
        /* IMMPredictor.model_gate: a_m = -0.5 (d2 + ln|S| + 2 ln 2 pi) + ln mu_m, the
         * log-sum-exp over the models, the model of least d2 (np.argmin's) */
        const double *mu = pb->mu + i * M;
        double top = 0.0;
        Py_ssize_t best = 0;
        for (Py_ssize_t m = 0; m < M; m++) {
            a[m] = -0.5 * ((dd[m] + ld[m]) + 2.0 * LOG_2PI) + log(mu[m]);
            /* np.max: a NaN wins */
            if (m == 0 || (!isnan(top) && (isnan(a[m]) || a[m] > top)))
                top = a[m];
        }
        for (Py_ssize_t m = 1; m < M && !isnan(dd[best]); m++)
            if (dd[m] < dd[best] || isnan(dd[m]))
                best = m;
        for (Py_ssize_t m = 0; m < M; m++)
            a[m] = exp(a[m] - top);
        double total = row_sum(a, M);
        d2_out[k] = dd[best];
        logdet_out[k] = ld[best];
        ll_out[k] = top + log(total);
    }
    free(a);
    cache_free(&c);
    return bad;
}

WITH_FMA Py_ssize_t
solve_gate_fma(const Problem *pb, double *d2_out, double *logdet_out, double *ll_out, int *nomem)
{
    return solve_gate_body(pb, d2_out, logdet_out, ll_out, nomem);
}

static Py_ssize_t
solve_gate(const Problem *pb, double *d2_out, double *logdet_out, double *ll_out, int *nomem)
{
    if (FMA_DISPATCH && has_fma)
        return solve_gate_fma(pb, d2_out, logdet_out, ll_out, nomem);
    return solve_gate_body(pb, d2_out, logdet_out, ll_out, nomem);
}

/* Per (track, model) for the update: range, azimuth, P H^T (4 x 2), S^-1 (i00 i01 i11), |S|,
 * K (4 x 2) and the posterior covariance (4 x 4) */
enum { U_R, U_AZ, U_PHT, U_SI = U_PHT + 8, U_DET = U_SI + 3, U_K, U_PP = U_K + 8, U_SIZE = U_PP + 16 };

static void
update_linearise(const Problem *pb, Py_ssize_t i, Py_ssize_t m, double *out)
{
    double Hp[4];
    const double *P = covariance(pb, i, m), *R = pb->R;
    polar_2d(state(pb, i, m), pb->se, pb->sn, &out[U_R], &out[U_AZ], Hp);
    double *PHt = out + U_PHT, *K = out + U_K, *Pp = out + U_PP;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            PHt[2 * i + j] = P[4 * i] * Hp[2 * j] + P[4 * i + 1] * Hp[2 * j + 1];
    /* S = Hp PHt[:2] + R (not symmetrised; _inv_small reads s00, s01, s11) */
    double s00 = Hp[0] * PHt[0] + Hp[1] * PHt[2] + R[0];
    double s01 = Hp[0] * PHt[1] + Hp[1] * PHt[3] + R[1];
    double s11 = Hp[2] * PHt[1] + Hp[3] * PHt[3] + R[3];
    double det = s00 * s11 - s01 * s01;
    double i00 = s11 / det, i01 = -s01 / det, i11 = s00 / det;
    out[U_SI] = i00;
    out[U_SI + 1] = i01;
    out[U_SI + 2] = i11;
    out[U_DET] = det;
    for (int i = 0; i < 4; i++) {
        K[2 * i] = PHt[2 * i] * i00 + PHt[2 * i + 1] * i01;
        K[2 * i + 1] = PHt[2 * i] * i01 + PHt[2 * i + 1] * i11;
    }
    double Pm[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            Pm[4 * i + j] = P[4 * i + j] - (K[2 * i] * PHt[2 * j] + K[2 * i + 1] * PHt[2 * j + 1]);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            Pp[4 * i + j] = (Pm[4 * i + j] + Pm[4 * j + i]) * 0.5;
}

static Py_ssize_t
solve_update(const Problem *pb, double *x_out, double *P_out, double *ll_out, double *mix_out,
             double *mu_out, int *nomem)
{
    Py_ssize_t M = pb->n_models, bad = 0;
    Cache c;
    if (cache_init(&c, pb, U_SIZE) < 0) {
        *nomem = 1;
        return 0;
    }
    for (Py_ssize_t k = 0; k < pb->n_pairs; k++) {
        int64_t i = pb->rows[k], j = pb->cols[k];
        double *lin;
        if (c.stamp[i] == 0) {
            c.stamp[i] = ++c.used;
            lin = c.cache + (c.used - 1) * M * U_SIZE;
            for (Py_ssize_t m = 0; m < M; m++) {
                update_linearise(pb, i, m, lin + m * U_SIZE);
                if (!(lin[m * U_SIZE + U_DET] > 0.0))
                    bad++;
            }
        }
        else
            lin = c.cache + (c.stamp[i] - 1) * M * U_SIZE;
        for (Py_ssize_t m = 0; m < M; m++) {
            const double *u = lin + m * U_SIZE, *K = u + U_K, *Si = u + U_SI;
            const double *x = state(pb, i, m);
            double y[2];
            residual(pb, j, u[U_R], u[U_AZ], y);
            double *xo = x_out + 4 * (k * M + m);
            for (int r = 0; r < 4; r++)
                xo[r] = x[r] + (K[2 * r] * y[0] + K[2 * r + 1] * y[1]);
            memcpy(P_out + 16 * (k * M + m), u + U_PP, 16 * sizeof(double));
            double d2 = y[0] * Si[0] * y[0] + y[0] * Si[1] * y[1];
            d2 += y[1] * Si[1] * y[0];
            d2 += y[1] * Si[2] * y[1];
            ll_out[k * M + m] = -0.5 * ((d2 + log(u[U_DET])) + 2.0 * LOG_2PI);
        }
        if (!pb->mu)
            continue;
        /* a_m = ll_m + ln mu_m: the pair's mixture likelihood (IMMPredictor.pda_update) and
         * the models' posterior probabilities (IMMPredictor.update) */
        const double *mu = pb->mu + i * M, *ll = ll_out + k * M;
        double *a = mu_out + k * M, top = 0.0;
        for (Py_ssize_t m = 0; m < M; m++) {
            a[m] = ll[m] + log(mu[m]);
            if (m == 0 || (!isnan(top) && (isnan(a[m]) || a[m] > top)))
                top = a[m];
        }
        for (Py_ssize_t m = 0; m < M; m++)
            a[m] = exp(a[m] - top);
        double total = row_sum(a, M);
        mix_out[k] = top + log(total);
        for (Py_ssize_t m = 0; m < M; m++)
            a[m] = a[m] / total;
    }
    cache_free(&c);
    return bad;
}


typedef struct {
    const char *x, *P;
    Py_ssize_t x_st, x_sm, P_st, P_sm;
    const double *mu, *x_pair, *P_pair, *ll, *beta, *beta0;
    const int64_t *tracks, *at;
    Py_ssize_t n_tracks, n_models, n_sel, n_pairs;
} Mix;

/* jpda.pda_mix of the tracks `tracks` (int64, T) of x, P (strided as in gate), mu (N*M), read
 * in place; at (int64, K): each pair's track among them; x_pair (K*M*4), P_pair (K*M*16), ll
 * (K*M): the pairs' updates; beta (K), beta0 (T): the marginals. Writes the T tracks' states,
 * covariances and model probabilities. The same operations in the same order (np.add.at
 * accumulates pair by pair): equal to the bit but for exp and log. */
static int
solve_mix(const Mix *mx, double *x_out, double *P_out, double *mu_out)
{
    Py_ssize_t M = mx->n_models, T = mx->n_sel, K = mx->n_pairs;
    double *w = malloc((size_t)((K > 0 ? K : 1) * M + 2 * T * M + M + 1) * sizeof(double));
    if (!w)
        return -1;
    double *w0 = w + K * M, *safe = w0 + T * M, *a = safe + T * M;
    for (Py_ssize_t k = 0; k < K; k++) {
        const double *mu = mx->mu + mx->tracks[mx->at[k]] * M;
        double *wk = w + k * M, top = 0.0;
        for (Py_ssize_t m = 0; m < M; m++) {
            a[m] = mx->ll[k * M + m] + log(mu[m]);
            if (m == 0 || (!isnan(top) && (isnan(a[m]) || a[m] > top)))
                top = a[m];
        }
        for (Py_ssize_t m = 0; m < M; m++)
            wk[m] = exp(a[m] - top);
        double f = mx->beta[k] / row_sum(wk, M);
        for (Py_ssize_t m = 0; m < M; m++)
            wk[m] *= f;
    }
    for (Py_ssize_t t = 0; t < T; t++) {
        const double *mu = mx->mu + mx->tracks[t] * M;
        for (Py_ssize_t m = 0; m < M; m++)
            mu_out[t * M + m] = w0[t * M + m] = mx->beta0[t] * mu[m];
    }
    for (Py_ssize_t k = 0; k < K; k++)
        for (Py_ssize_t m = 0; m < M; m++)
            mu_out[mx->at[k] * M + m] += w[k * M + m];
    for (Py_ssize_t tm = 0; tm < T * M; tm++)
        safe[tm] = mu_out[tm] > 0 ? mu_out[tm] : 1.0;
    /* x_new = c0 x + sum_k c_k x_pair_k */
    for (Py_ssize_t t = 0; t < T; t++)
        for (Py_ssize_t m = 0; m < M; m++) {
            const double *x = (const double *)(mx->x + mx->tracks[t] * mx->x_st + m * mx->x_sm);
            double c0 = w0[t * M + m] / safe[t * M + m];
            for (int i = 0; i < 4; i++)
                x_out[4 * (t * M + m) + i] = c0 * x[i];
        }
    for (Py_ssize_t k = 0; k < K; k++)
        for (Py_ssize_t m = 0; m < M; m++) {
            Py_ssize_t tm = mx->at[k] * M + m;
            double c = w[k * M + m] / safe[tm];
            for (int i = 0; i < 4; i++)
                x_out[4 * tm + i] += c * mx->x_pair[4 * (k * M + m) + i];
        }
    /* P_new = c0 (P + d0 d0^T) + sum_k c_k (P_k + dp dp^T), then symmetrised */
    for (Py_ssize_t t = 0; t < T; t++)
        for (Py_ssize_t m = 0; m < M; m++) {
            Py_ssize_t tm = t * M + m;
            const double *x = (const double *)(mx->x + mx->tracks[t] * mx->x_st + m * mx->x_sm);
            const double *P = (const double *)(mx->P + mx->tracks[t] * mx->P_st + m * mx->P_sm);
            double c0 = w0[tm] / safe[tm], d0[4];
            for (int i = 0; i < 4; i++)
                d0[i] = x[i] - x_out[4 * tm + i];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    P_out[16 * tm + 4 * i + j] = c0 * (P[4 * i + j] + d0[i] * d0[j]);
        }
    for (Py_ssize_t k = 0; k < K; k++)
        for (Py_ssize_t m = 0; m < M; m++) {
            Py_ssize_t tm = mx->at[k] * M + m, km = k * M + m;
            double c = w[km] / safe[tm], dp[4];
            for (int i = 0; i < 4; i++)
                dp[i] = mx->x_pair[4 * km + i] - x_out[4 * tm + i];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    P_out[16 * tm + 4 * i + j] += c * (mx->P_pair[16 * km + 4 * i + j] + dp[i] * dp[j]);
        }
    for (Py_ssize_t t = 0; t < T; t++) {
        double total = row_sum(mu_out + t * M, M);
        for (Py_ssize_t m = 0; m < M; m++)
            mu_out[t * M + m] /= total;
        for (Py_ssize_t m = 0; m < M; m++) {
            double *Pn = P_out + 16 * (t * M + m), sym[16];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    sym[4 * i + j] = 0.5 * (Pn[4 * i + j] + Pn[4 * j + i]);
            memcpy(Pn, sym, sizeof sym);
        }
    }
    free(w);
    return 0;
}

/* A C-contiguous buffer of `n` items (8 bytes each) of one of the `formats`; 0 with an
 * exception set when it is not. */
static int
get_array(PyObject *obj, Py_buffer *view, const char *name, const char *formats, Py_ssize_t n,
          int writable)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return 0;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '=' || *fmt == '@' || *fmt == '<')
        fmt++;
    if (view->itemsize != 8 || strlen(fmt) != 1 || !strchr(formats, *fmt)) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous array of 8-byte '%s' items", name,
                     formats);
        PyBuffer_Release(view);
        return 0;
    }
    if (n >= 0 && view->len / 8 != n) {
        PyErr_Format(PyExc_ValueError, "%s has %zd items, not %zd", name, view->len / 8, n);
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* x (N, [M,] 4) or P (N, [M,] 4, 4) of float64, strided over N and M, each state (covariance)
 * contiguous; 0 with an exception set when it is not. */
static int
get_states(PyObject *obj, Py_buffer *view, const char *name, int mat, Py_ssize_t M,
           Py_ssize_t *n, Py_ssize_t *st, Py_ssize_t *sm)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_STRIDES | PyBUF_FORMAT) < 0)
        return 0;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '=' || *fmt == '@' || *fmt == '<')
        fmt++;
    int nd = view->ndim, lead = nd - 1 - mat;
    if (strcmp(fmt, "d") != 0 || view->itemsize != 8 || lead < 1 || lead > 2 ||
        view->shape[nd - 1] != 4 || view->strides[nd - 1] != 8 ||
        (mat && (view->shape[nd - 2] != 4 || view->strides[nd - 2] != 32)) ||
        (lead == 1 ? M != 1 : view->shape[1] != M)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be float64 (N, [M,] 4%s) with contiguous %s (%zd models)", name,
                     mat ? ", 4" : "", mat ? "matrices" : "rows", M);
        PyBuffer_Release(view);
        return 0;
    }
    *n = view->shape[0];
    *st = view->strides[0];
    *sm = lead == 2 ? view->strides[1] : 0;
    return 1;
}

/* Parses the arguments common to both functions into pb; views[0..6] held on success
 * (x, P, rows, cols, z, R), returns the number held (6) or -1 with an exception set. */
static int
parse_common(PyObject *const objs[6], Py_buffer views[6], Problem *pb)
{
    static const char *names[6] = {"x", "P", "rows", "cols", "z", "R"};
    static const char *formats[6] = {"d", "d", "lq", "lq", "d", "d"};
    int held = 0;
    Py_ssize_t M = pb->n_models, n_P = 0;
    if (M < 1) {
        PyErr_SetString(PyExc_ValueError, "n_models must be >= 1");
        return -1;
    }
    for (; held < 6; held++) {
        int ok = held == 0   ? get_states(objs[0], &views[0], "x", 0, M, &pb->n_tracks,
                                          &pb->x_st, &pb->x_sm)
                 : held == 1 ? get_states(objs[1], &views[1], "P", 1, M, &n_P, &pb->P_st,
                                          &pb->P_sm)
                             : get_array(objs[held], &views[held], names[held], formats[held],
                                         held == 5 ? 4 : held == 3 ? views[2].len / 8 : -1, 0);
        if (!ok)
            goto fail;
    }
    if (n_P != pb->n_tracks || views[4].len / 8 % 2 != 0) {
        PyErr_SetString(PyExc_ValueError, "x and P must have the same tracks, z D*2 items");
        goto fail;
    }
    pb->x = views[0].buf;
    pb->P = views[1].buf;
    pb->rows = views[2].buf;
    pb->cols = views[3].buf;
    pb->z = views[4].buf;
    pb->R = views[5].buf;
    pb->n_pairs = views[2].len / 8;
    pb->n_meas = views[4].len / 8 / 2;
    for (Py_ssize_t k = 0; k < pb->n_pairs; k++) {
        if (pb->rows[k] < 0 || pb->rows[k] >= pb->n_tracks || pb->cols[k] < 0 ||
            pb->cols[k] >= pb->n_meas) {
            PyErr_Format(PyExc_IndexError,
                         "pair %zd: track %lld or detection %lld out of range (%zd, %zd)", k,
                         (long long)pb->rows[k], (long long)pb->cols[k], pb->n_tracks,
                         pb->n_meas);
            goto fail;
        }
    }
    return held;
fail:
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    return -1;
}

static PyObject *
ekf_gate(PyObject *self, PyObject *args)
{
    PyObject *objs[6], *o_mu, *o_d2, *o_ld, *o_ll;
    Problem pb = {0};
    if (!PyArg_ParseTuple(args, "OOnOOOOddOOOO:gate", &objs[0], &objs[1], &pb.n_models,
                          &objs[2], &objs[3], &objs[4], &objs[5], &pb.se, &pb.sn, &o_mu, &o_d2,
                          &o_ld, &o_ll))
        return NULL;
    Py_buffer views[6], out[4];
    int held = parse_common(objs, views, &pb), outs = 0;
    if (held < 0)
        return NULL;
    PyObject *result = NULL;
    int with_mu = o_mu != Py_None;
    Py_ssize_t per = with_mu ? pb.n_pairs : pb.n_pairs * pb.n_models;
    if (with_mu) {
        if (!get_array(o_mu, &out[outs], "mu", "d", pb.n_tracks * pb.n_models, 0))
            goto done;
        pb.mu = out[outs++].buf;
    }
    else if (o_ll != Py_None) {
        PyErr_SetString(PyExc_ValueError, "ll is written only with mu");
        goto done;
    }
    PyObject *writes[3] = {o_d2, o_ld, o_ll};
    static const char *names[3] = {"d2", "logdet", "ll"};
    double *bufs[3] = {NULL, NULL, NULL};
    for (int w = 0; w < (with_mu ? 3 : 2); w++) {
        if (!get_array(writes[w], &out[outs], names[w], "d", per, 1))
            goto done;
        bufs[w] = out[outs++].buf;
    }
    Py_ssize_t bad;
    int nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    bad = solve_gate(&pb, bufs[0], bufs[1], bufs[2], &nomem);
    Py_END_ALLOW_THREADS
    if (nomem)
        PyErr_NoMemory();
    else
        result = PyLong_FromSsize_t(bad);
done:
    for (int i = 0; i < outs; i++)
        PyBuffer_Release(&out[i]);
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    return result;
}

static PyObject *
ekf_update(PyObject *self, PyObject *args)
{
    PyObject *objs[6], *o_x, *o_P, *o_ll, *o_mu = Py_None, *o_mix = Py_None, *o_mu_post = Py_None;
    Problem pb = {0};
    if (!PyArg_ParseTuple(args, "OOnOOOOddOOO|OOO:update", &objs[0], &objs[1], &pb.n_models,
                          &objs[2], &objs[3], &objs[4], &objs[5], &pb.se, &pb.sn, &o_x, &o_P,
                          &o_ll, &o_mu, &o_mix, &o_mu_post))
        return NULL;
    Py_buffer views[6], out[6];
    int held = parse_common(objs, views, &pb), outs = 0;
    if (held < 0)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t km = pb.n_pairs * pb.n_models;
    PyObject *writes[3] = {o_x, o_P, o_ll};
    static const char *names[3] = {"x_out", "P_out", "ll_out"};
    const Py_ssize_t sizes[3] = {4 * km, 16 * km, km};
    for (; outs < 3; outs++)
        if (!get_array(writes[outs], &out[outs], names[outs], "d", sizes[outs], 1))
            goto done;
    double *mix = NULL, *mu_post = NULL;
    if ((o_mu == Py_None) != (o_mix == Py_None) || (o_mu == Py_None) != (o_mu_post == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "update: mu, mix and mu_post go together");
        goto done;
    }
    if (o_mu != Py_None) {
        if (!get_array(o_mu, &out[outs], "mu", "d", pb.n_tracks * pb.n_models, 0))
            goto done;
        pb.mu = out[outs++].buf;
        if (!get_array(o_mix, &out[outs], "mix", "d", pb.n_pairs, 1))
            goto done;
        mix = out[outs++].buf;
        if (!get_array(o_mu_post, &out[outs], "mu_post", "d", km, 1))
            goto done;
        mu_post = out[outs++].buf;
    }
    Py_ssize_t bad;
    int nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    bad = solve_update(&pb, out[0].buf, out[1].buf, out[2].buf, mix, mu_post, &nomem);
    Py_END_ALLOW_THREADS
    if (nomem)
        PyErr_NoMemory();
    else
        result = PyLong_FromSsize_t(bad);
done:
    for (int i = 0; i < outs; i++)
        PyBuffer_Release(&out[i]);
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    return result;
}

static PyObject *
ekf_pda_mix(PyObject *self, PyObject *args)
{
    PyObject *o[14];
    Mix mx = {0};
    if (!PyArg_ParseTuple(args, "OOOnOOOOOOOOOO:pda_mix", &o[0], &o[1], &o[2], &mx.n_models,
                          &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11],
                          &o[12]))
        return NULL;
    if (mx.n_models < 1) {
        PyErr_SetString(PyExc_ValueError, "n_models must be >= 1");
        return NULL;
    }
    /* x, P, mu, tracks, at, x_pair, P_pair, ll, beta, beta0, x_out, P_out, mu_out */
    Py_buffer v[13];
    int held = 0;
    PyObject *result = NULL;
    Py_ssize_t M = mx.n_models, n_P = 0;
    if (!get_states(o[0], &v[held], "x", 0, M, &mx.n_tracks, &mx.x_st, &mx.x_sm))
        goto done;
    held++;
    if (!get_states(o[1], &v[held], "P", 1, M, &n_P, &mx.P_st, &mx.P_sm))
        goto done;
    held++;
    if (n_P != mx.n_tracks) {
        PyErr_SetString(PyExc_ValueError, "x and P must have the same tracks");
        goto done;
    }
    static const char *names[11] = {"mu", "tracks", "at", "x_pair", "P_pair", "ll", "beta",
                                    "beta0", "x_out", "P_out", "mu_out"};
    static const char *formats[11] = {"d", "lq", "lq", "d", "d", "d", "d", "d", "d", "d", "d"};
    for (int i = 0; i < 11; i++, held++) {
        Py_ssize_t T = mx.n_sel, K = mx.n_pairs;
        Py_ssize_t n = i == 0 ? mx.n_tracks * M : i == 1 || i == 2 ? -1
                       : i == 3 ? 4 * K * M : i == 4 ? 16 * K * M : i == 5 ? K * M
                       : i == 6 ? K : i == 7 ? T : i == 8 ? 4 * T * M : i == 9 ? 16 * T * M
                       : T * M;
        if (!get_array(o[i + 2], &v[held], names[i], formats[i], n, i >= 8))
            goto done;
        if (i == 1)
            mx.n_sel = v[held].len / 8;
        if (i == 2)
            mx.n_pairs = v[held].len / 8;
    }
    mx.mu = v[2].buf;
    mx.tracks = v[3].buf;
    mx.at = v[4].buf;
    mx.x_pair = v[5].buf;
    mx.P_pair = v[6].buf;
    mx.ll = v[7].buf;
    mx.beta = v[8].buf;
    mx.beta0 = v[9].buf;
    mx.x = v[0].buf;
    mx.P = v[1].buf;
    for (Py_ssize_t t = 0; t < mx.n_sel; t++)
        if (mx.tracks[t] < 0 || mx.tracks[t] >= mx.n_tracks) {
            PyErr_Format(PyExc_IndexError, "track %lld out of range (%zd)",
                         (long long)mx.tracks[t], mx.n_tracks);
            goto done;
        }
    for (Py_ssize_t k = 0; k < mx.n_pairs; k++)
        if (mx.at[k] < 0 || mx.at[k] >= mx.n_sel) {
            PyErr_Format(PyExc_IndexError, "pair %zd: track %lld out of range (%zd)", k,
                         (long long)mx.at[k], mx.n_sel);
            goto done;
        }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = solve_mix(&mx, v[10].buf, v[11].buf, v[12].buf);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_NoMemory();
    else
        result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&v[i]);
    return result;
}

/* gaters.candidate_pairs' expansion of one radius group: for each track `rows[g]` (key
 * tkey[g]), each of the 9 neighbouring cells (offsets), each detection of the cell's slot (in the
 * order `order` gives), the pair if its squared distance (x, y[, z]) is within the track's radius
 * squared; the same pairs in the same order as the NumPy expansion. */
static PyObject *
ekf_grid_pairs(PyObject *self, PyObject *args)
{
    PyObject *o[12];
    long long mask;
    if (!PyArg_ParseTuple(args, "OOOOOOLOOOOO:grid_pairs", &o[0], &o[1], &o[2], &o[3], &o[4],
                          &o[5], &mask, &o[6], &o[7], &o[8], &o[9], &o[10]))
        return NULL;
    /* track_pos (N*d), meas_pos (D*d), radius (N), rows (G), tkey (G), offsets, count (slots),
     * start (slots), order (D), ti_out, mj_out */
    static const char *names[11] = {"track_pos", "meas_pos", "radius", "rows", "tkey", "offsets",
                                    "count", "start", "order", "ti_out", "mj_out"};
    static const char *formats[11] = {"d", "d", "d", "lq", "lq", "lq", "lq", "lq", "lq", "lq",
                                      "lq"};
    Py_buffer v[11];
    int held = 0;
    PyObject *result = NULL;
    for (; held < 11; held++)
        if (!get_array(o[held], &v[held], names[held], formats[held], -1, held >= 9))
            goto done;
    const double *tp = v[0].buf, *mp = v[1].buf, *radius = v[2].buf;
    const int64_t *rows = v[3].buf, *tkey = v[4].buf, *offsets = v[5].buf, *count = v[6].buf;
    const int64_t *start = v[7].buf, *order = v[8].buf;
    int64_t *ti = v[9].buf, *mj = v[10].buf;
    Py_ssize_t n = v[2].len / 8, G = v[3].len / 8, n_off = v[5].len / 8, slots = v[6].len / 8;
    Py_ssize_t D = v[8].len / 8, cap = v[9].len / 8, d = n > 0 ? v[0].len / 8 / n : 0;
    if (n < 1 || d < 2 || v[0].len / 8 != n * d || v[1].len / 8 != D * d || v[4].len / 8 != G ||
        v[7].len / 8 != slots || v[10].len / 8 != cap || (unsigned long long)mask + 1 != (unsigned long long)slots) {
        PyErr_SetString(PyExc_ValueError, "grid_pairs: inconsistent sizes");
        goto done;
    }
    for (Py_ssize_t g = 0; g < G; g++)
        if (rows[g] < 0 || rows[g] >= n) {
            PyErr_SetString(PyExc_IndexError, "grid_pairs: a row out of range");
            goto done;
        }
    for (Py_ssize_t s_ = 0; s_ < slots; s_++)
        if (start[s_] < 0 || count[s_] < 0 || start[s_] + count[s_] > D) {
            PyErr_SetString(PyExc_IndexError, "grid_pairs: a slot out of range");
            goto done;
        }
    for (Py_ssize_t q = 0; q < D; q++)
        if (order[q] < 0 || order[q] >= D) {
            PyErr_SetString(PyExc_IndexError, "grid_pairs: order out of range");
            goto done;
        }
    Py_ssize_t out = 0;
    int full = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; g < G && !full; g++) {
        int64_t i = rows[g];
        const double *t = tp + i * d;
        double r2 = radius[i] * radius[i];
        for (Py_ssize_t k = 0; k < n_off && !full; k++) {
            int64_t slot = (tkey[g] + offsets[k]) & (int64_t)mask;
            for (int64_t q = start[slot]; q < start[slot] + count[slot]; q++) {
                int64_t j = order[q];
                const double *m = mp + j * d;
                double dx = t[0] - m[0], dy = t[1] - m[1];
                double d2 = dx * dx + dy * dy;
                if (d > 2) {
                    double extra = 0.0;
                    for (Py_ssize_t c = 2; c < d; c++) {
                        double dz = t[c] - m[c];
                        extra = c == 2 ? dz * dz : extra + dz * dz;
                    }
                    d2 += extra;
                }
                if (d2 <= r2) {
                    if (out >= cap) {
                        full = 1;
                        break;
                    }
                    ti[out] = i;
                    mj[out++] = j;
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (full)
        PyErr_SetString(PyExc_ValueError, "grid_pairs: more pairs than ti_out holds");
    else
        result = PyLong_FromSsize_t(out);
done:
    for (int k = 0; k < held; k++)
        PyBuffer_Release(&v[k]);
    return result;
}

/* NumPy's matrix products (OpenBLAS's gemm kernel, on the machines we run on) accumulate
 * each element over k in order with fused multiply-adds from 0: measured equal to the bit for
 * the (M x M) @ (M x n) and (N x 16) @ (16 x 16) products of the IMM's mixing and prediction. */
HOT double
gemm_dot(const double *a, Py_ssize_t a_step, const double *b, Py_ssize_t b_step, Py_ssize_t k)
{
    double acc = 0.0;
    for (Py_ssize_t i = 0; i < k; i++)
        acc = fma(a[i * a_step], b[i * b_step], acc);
    return acc;
}

/* The last row of a product of an odd number of rows (3 or more): OpenBLAS's one-row tail
 * kernel sums k in four interleaved chains, added pairwise (measured, K = 16). */
HOT double
gemm_dot_tail(const double *a, const double *b, Py_ssize_t b_step, Py_ssize_t k)
{
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    for (Py_ssize_t i = 0; i < k; i++)
        acc[i % 4] = fma(a[i], b[i * b_step], acc[i % 4]);
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* np.maximum(v, lo): NaN kept */
static inline double
at_least(double v, double lo)
{
    return (v >= lo || isnan(v)) ? v : lo;
}

/* IMMPredictor.predict when every track has the same step: `kalman.imm_mix` with the mixing
 * floor, then each model's x F^T and vec(P) (F (x) F)^T + Q, track by track (pi (M*M), FT
 * (M*16), FFT (M*256), Q (M*16) from predictors._imm_step; block: the rows of each of
 * _tall_matmul's products). */
HOT int
solve_imm_predict_body(const char *x_in, Py_ssize_t x_st, Py_ssize_t x_sm, const char *P_in,
                  Py_ssize_t P_st, Py_ssize_t P_sm, const double *mu_in, Py_ssize_t N,
                  Py_ssize_t M, const double *pi, double floor_w, const double *FT,
                  const double *FFT, const double *Q, Py_ssize_t block, double *x_out,
                  double *P_out, double *mu_out)
{
    double *w = malloc((size_t)(M * M * 2 + M * 4 + M * 16 + M * 20 + M) * sizeof(double));
    if (!w)
        return -1;
    double *wT = w + M * M, *x0 = wT + M * M, *second = x0 + M * 4, *xs = second + M * 16;
    double *Ps = xs + M * 4, *sum = Ps + M * 16;
    for (Py_ssize_t t = 0; t < N; t++) {
        const double *mu = mu_in + t * M;
        double *cb = mu_out + t * M;
        /* the prediction's products run over blocks of `block` tracks (predictors._tall_matmul) */
        Py_ssize_t rows = N - t / block * block < block ? N - t / block * block : block;
        /* (a product of one row is a matrix-vector product, summed otherwise by OpenBLAS: its
         * last bits may differ; a lone track, or 1 past a multiple of 512) */
        int tail = rows >= 3 && rows % 2 == 1 && t % block == rows - 1;
        for (Py_ssize_t m = 0; m < M; m++) {
            memcpy(xs + 4 * m, x_in + t * x_st + m * x_sm, 4 * sizeof(double));
            memcpy(Ps + 16 * m, P_in + t * P_st + m * P_sm, 16 * sizeof(double));
        }
        for (Py_ssize_t j = 0; j < M; j++)
            cb[j] = gemm_dot(mu, 1, pi + j, M, M); /* mu @ pi */
        for (Py_ssize_t i = 0; i < M; i++)
            for (Py_ssize_t j = 0; j < M; j++)
                w[i * M + j] = mu[i] * pi[i * M + j] / at_least(cb[j], 1e-300);
        if (floor_w > 0.0) {
            for (Py_ssize_t i = 0; i < M * M; i++)
                w[i] = w[i] < floor_w ? 0.0 : w[i];
            for (Py_ssize_t j = 0; j < M; j++) {
                double acc = w[j];
                for (Py_ssize_t i = 1; i < M; i++)
                    acc += w[i * M + j];
                sum[j] = at_least(acc, 1e-300);
            }
            for (Py_ssize_t i = 0; i < M; i++)
                for (Py_ssize_t j = 0; j < M; j++)
                    w[i * M + j] = w[i * M + j] / sum[j];
        }
        for (Py_ssize_t i = 0; i < M; i++)
            for (Py_ssize_t j = 0; j < M; j++)
                wT[j * M + i] = w[i * M + j];
        for (Py_ssize_t j = 0; j < M; j++)
            for (int c = 0; c < 4; c++)
                x0[4 * j + c] = gemm_dot(wT + j * M, 1, xs + c, 4, M);
        /* second_i = d_i d_i^T + P_i, d_i = x_i - x_0 */
        for (Py_ssize_t i = 0; i < M; i++) {
            double d[4];
            for (int c = 0; c < 4; c++)
                d[c] = xs[4 * i + c] - xs[c];
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++)
                    second[16 * i + 4 * a + b] = d[a] * d[b] + Ps[16 * i + 4 * a + b];
        }
        for (Py_ssize_t j = 0; j < M; j++) {
            double e[4], P0[16], P0s[16];
            for (int c = 0; c < 4; c++)
                e[c] = x0[4 * j + c] - xs[c];
            /* P0[q] = gemm_dot(wT + j*M, 1, second + q, 16, M), the 16 sums side by side
             * (each in gemm_dot's order: the same bits, in vector registers) */
            for (int q = 0; q < 16; q++)
                P0[q] = 0.0;
            for (Py_ssize_t i = 0; i < M; i++)
                for (int q = 0; q < 16; q++)
                    P0[q] = fma(wT[j * M + i], second[16 * i + q], P0[q]);
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++)
                    P0[4 * a + b] -= e[a] * e[b];
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++)
                    P0s[4 * a + b] = 0.5 * (P0[4 * a + b] + P0[4 * b + a]);
            /* the prediction: x0 F^T, vec(P0) (F (x) F)^T + Q */
            double *xo = x_out + 4 * (t * M + j), *Po = P_out + 16 * (t * M + j);
            const double *ft = FT + 16 * j, *fft = FFT + 256 * j, *q = Q + 16 * j;
            for (int c = 0; c < 4; c++)
                xo[c] = gemm_dot(x0 + 4 * j, 1, ft + c, 4, 4);
            if (tail)
                for (int c = 0; c < 16; c++)
                    Po[c] = gemm_dot_tail(P0s, fft + c, 16, 16) + q[c];
            else {
                /* Po[c] = gemm_dot(P0s, 1, fft + c, 16, 16) + q[c], side by side as above */
                double acc[16] = {0.0};
                for (int k = 0; k < 16; k++)
                    for (int c = 0; c < 16; c++)
                        acc[c] = fma(P0s[k], fft[16 * k + c], acc[c]);
                for (int c = 0; c < 16; c++)
                    Po[c] = acc[c] + q[c];
            }
        }
    }
    free(w);
    return 0;
}

WITH_FMA int
solve_imm_predict_fma(const char *x_in, Py_ssize_t x_st, Py_ssize_t x_sm, const char *P_in,
                      Py_ssize_t P_st, Py_ssize_t P_sm, const double *mu_in, Py_ssize_t N,
                      Py_ssize_t M, const double *pi, double floor_w, const double *FT,
                      const double *FFT, const double *Q, Py_ssize_t block, double *x_out,
                      double *P_out, double *mu_out)
{
    return solve_imm_predict_body(x_in, x_st, x_sm, P_in, P_st, P_sm, mu_in, N, M, pi, floor_w,
                                  FT, FFT, Q, block, x_out, P_out, mu_out);
}

static int
solve_imm_predict(const char *x_in, Py_ssize_t x_st, Py_ssize_t x_sm, const char *P_in,
                  Py_ssize_t P_st, Py_ssize_t P_sm, const double *mu_in, Py_ssize_t N,
                  Py_ssize_t M, const double *pi, double floor_w, const double *FT,
                  const double *FFT, const double *Q, Py_ssize_t block, double *x_out,
                  double *P_out, double *mu_out)
{
    if (FMA_DISPATCH && has_fma)
        return solve_imm_predict_fma(x_in, x_st, x_sm, P_in, P_st, P_sm, mu_in, N, M, pi,
                                     floor_w, FT, FFT, Q, block, x_out, P_out, mu_out);
    return solve_imm_predict_body(x_in, x_st, x_sm, P_in, P_st, P_sm, mu_in, N, M, pi, floor_w,
                                  FT, FFT, Q, block, x_out, P_out, mu_out);
}

static PyObject *
ekf_imm_predict(PyObject *self, PyObject *args)
{
    PyObject *o[10];
    Py_ssize_t M, block;
    double floor_w;
    if (!PyArg_ParseTuple(args, "OOOnOdOOOnOOO:imm_predict", &o[0], &o[1], &o[2], &M, &o[3],
                          &floor_w, &o[4], &o[5], &o[6], &block, &o[7], &o[8], &o[9]))
        return NULL;
    if (M < 1 || block < 1) {
        PyErr_SetString(PyExc_ValueError, "imm_predict: n_models and block must be >= 1");
        return NULL;
    }
    /* x, P (strided), mu, pi, FT, FFT, Q, x_out, P_out, mu_out */
    Py_buffer v[10];
    int held = 0;
    PyObject *result = NULL;
    Py_ssize_t N = 0, n_P = 0, x_st, x_sm, P_st, P_sm;
    if (!get_states(o[0], &v[held], "x", 0, M, &N, &x_st, &x_sm))
        goto done;
    held++;
    if (!get_states(o[1], &v[held], "P", 1, M, &n_P, &P_st, &P_sm))
        goto done;
    held++;
    if (n_P != N) {
        PyErr_SetString(PyExc_ValueError, "x and P must have the same tracks");
        goto done;
    }
    static const char *names[8] = {"mu", "pi", "FT", "FFT", "Q", "x_out", "P_out", "mu_out"};
    const Py_ssize_t sizes[8] = {N * M, M * M, 16 * M, 256 * M, 16 * M, 4 * N * M, 16 * N * M,
                                 N * M};
    for (int i = 0; i < 8; i++, held++)
        if (!get_array(o[i + 2], &v[held], names[i], "d", sizes[i], i >= 5))
            goto done;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = solve_imm_predict(v[0].buf, x_st, x_sm, v[1].buf, P_st, P_sm, v[2].buf, N, M,
                           v[3].buf, floor_w, v[4].buf, v[5].buf, v[6].buf, block, v[7].buf,
                           v[8].buf, v[9].buf);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_NoMemory();
    else
        result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&v[i]);
    return result;
}

/* kalman.imm_combine: the moment-matched estimate of each track's models. x_c = mu @ x and
 * P_c = mu @ vec(P) are OpenBLAS matrix-vector products in NumPy, summed otherwise than here
 * (the last bits may differ: nothing recursive reads the combined estimate, it is output, wide
 * gate and deletion); Y^T Y is its gemm, summed as here. */
HOT int
solve_imm_combine_body(const char *x_in, Py_ssize_t x_st, Py_ssize_t x_sm, const char *P_in,
                       Py_ssize_t P_st, Py_ssize_t P_sm, const double *mu_in, Py_ssize_t N,
                       Py_ssize_t M, double *x_out, double *P_out)
{
    double *Y = malloc((size_t)(M * 4 + M) * sizeof(double));
    if (!Y)
        return -1;
    double *flat = Y + M * 4;
    for (Py_ssize_t m = 0; m < M; m++)
        flat[m] = 1.0 / (double)M;
    for (Py_ssize_t t = 0; t < N; t++) {
        const double *mu = mu_in ? mu_in + t * M : flat;
        double *xc = x_out + 4 * t, *Pc = P_out + 16 * t, acc[16];
        for (int c = 0; c < 4; c++) {
            double v = 0.0;
            for (Py_ssize_t m = 0; m < M; m++)
                v = fma(mu[m], ((const double *)(x_in + t * x_st + m * x_sm))[c], v);
            xc[c] = v;
        }
        for (int c = 0; c < 16; c++) {
            double v = 0.0;
            for (Py_ssize_t m = 0; m < M; m++)
                v = fma(mu[m], ((const double *)(P_in + t * P_st + m * P_sm))[c], v);
            acc[c] = v;
        }
        for (Py_ssize_t m = 0; m < M; m++) {
            const double *x = (const double *)(x_in + t * x_st + m * x_sm);
            double s = sqrt(mu[m]);
            for (int c = 0; c < 4; c++)
                Y[4 * m + c] = (x[c] - xc[c]) * s;
        }
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                acc[4 * a + b] += gemm_dot(Y + a, 4, Y + b, 4, M);
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                Pc[4 * a + b] = 0.5 * (acc[4 * a + b] + acc[4 * b + a]);
    }
    free(Y);
    return 0;
}

WITH_FMA int
solve_imm_combine_fma(const char *x_in, Py_ssize_t x_st, Py_ssize_t x_sm, const char *P_in,
                      Py_ssize_t P_st, Py_ssize_t P_sm, const double *mu_in, Py_ssize_t N,
                      Py_ssize_t M, double *x_out, double *P_out)
{
    return solve_imm_combine_body(x_in, x_st, x_sm, P_in, P_st, P_sm, mu_in, N, M, x_out,
                                  P_out);
}

static PyObject *
ekf_imm_combine(PyObject *self, PyObject *args)
{
    PyObject *o[5];
    Py_ssize_t M;
    if (!PyArg_ParseTuple(args, "OOOnOO:imm_combine", &o[0], &o[1], &o[2], &M, &o[3], &o[4]))
        return NULL;
    if (M < 1) {
        PyErr_SetString(PyExc_ValueError, "imm_combine: n_models must be >= 1");
        return NULL;
    }
    Py_buffer v[5];
    int held = 0;
    PyObject *result = NULL;
    Py_ssize_t N = 0, n_P = 0, x_st, x_sm, P_st, P_sm;
    const double *mu = NULL;
    if (!get_states(o[0], &v[held], "x", 0, M, &N, &x_st, &x_sm))
        goto done;
    held++;
    if (!get_states(o[1], &v[held], "P", 1, M, &n_P, &P_st, &P_sm))
        goto done;
    held++;
    if (n_P != N) {
        PyErr_SetString(PyExc_ValueError, "x and P must have the same tracks");
        goto done;
    }
    if (o[2] != Py_None) {
        if (!get_array(o[2], &v[held], "mu", "d", N * M, 0))
            goto done;
        mu = v[held++].buf;
    }
    if (!get_array(o[3], &v[held], "x_out", "d", 4 * N, 1))
        goto done;
    double *x_out = v[held++].buf;
    if (!get_array(o[4], &v[held], "P_out", "d", 16 * N, 1))
        goto done;
    double *P_out = v[held++].buf;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (FMA_DISPATCH && has_fma)
        rc = solve_imm_combine_fma(v[0].buf, x_st, x_sm, v[1].buf, P_st, P_sm, mu, N, M, x_out,
                                   P_out);
    else
        rc = solve_imm_combine_body(v[0].buf, x_st, x_sm, v[1].buf, P_st, P_sm, mu, N, M,
                                    x_out, P_out);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_NoMemory();
    else
        result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&v[i]);
    return result;
}

static PyMethodDef ekf_methods[] = {
    {"imm_combine", ekf_imm_combine, METH_VARARGS,
     "imm_combine(x, P, mu, n_models, x_out, P_out): kalman.imm_combine of every track (mu "
     "None: equal weights)."},
    {"imm_predict", ekf_imm_predict, METH_VARARGS,
     "imm_predict(x, P, mu, n_models, pi, floor, FT, FFT, Q, block, x_out, P_out, mu_out): the "
     "IMM's "
     "mixing and prediction of every track over one step (IMMPredictor.predict)."},
    {"grid_pairs", ekf_grid_pairs, METH_VARARGS,
     "grid_pairs(track_pos, meas_pos, radius, rows, tkey, offsets, mask, count, start, order, "
     "ti_out, mj_out) -> pairs: gaters.candidate_pairs' expansion of one radius group."},
    {"pda_mix", ekf_pda_mix, METH_VARARGS,
     "pda_mix(x, P, mu, n_models, tracks, at, x_pair, P_pair, ll, beta, beta0, x_out, P_out, "
     "mu_out): jpda.pda_mix of tracks `tracks` of x, P, mu (the module's comment)."},
    {"gate", ekf_gate, METH_VARARGS,
     "gate(x, P, n_models, rows, cols, z, R, sensor_e, sensor_n, mu, d2, logdet, ll) -> bad: "
     "the gate's distances of 2-D range/azimuth pairs (the module's comment)."},
    {"update", ekf_update, METH_VARARGS,
     "update(x, P, n_models, rows, cols, z, R, sensor_e, sensor_n, x_out, P_out, ll_out[, mu, "
     "mix, mu_post]) -> bad: the EKF update of 2-D range/azimuth pairs (the module's comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef ekf_module = {
    PyModuleDef_HEAD_INIT, "mcc.tracking._ekf",
    "The tracker's 2-D range/azimuth EKF gate and update over a scan's pairs (C).", -1,
    ekf_methods,
};

PyMODINIT_FUNC
PyInit__ekf(void)
{
#if FMA_DISPATCH
    __builtin_cpu_init();
    has_fma = __builtin_cpu_supports("fma");
#endif
    return PyModule_Create(&ekf_module);
}
