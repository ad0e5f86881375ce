/* mcc.tracking._jpda: the JPDA association marginals of one scan's gated pairs, every cluster in
 * one call (mcc.tracking.jpda.JPDAAssociator.marginals, whose NumPy code is the reference).
 *
 * Written by hand because the clusters are small (2-8 tracks, a few to a few hundred joint
 * events) and many: the NumPy enumeration spends its time in the fixed cost of its array calls
 * (~20 per cluster size, and per track of the enumeration), not in arithmetic. Measured
 * 2026-11-27 against the NumPy path, alternated 9 times in one process (AMD EPYC, 2 shared
 * cores, load 2-4), CPU medians over the scans of the training draws: on `formation` the
 * marginals of a scan 0.78 -> 0.085 ms and the tracker's step 2.00 -> 1.23 ms; on `straight`
 * 0.20 -> 0.021 and 1.00 -> 0.89 ms; one `formation` draw at 300 targets 12.2 -> 1.56 and
 * 20.2 -> 9.4 ms. On the `formation` report draws the tracker went from 36x to 54x the speed of
 * Stone Soup's searched configuration (1.75 -> 1.18 against 63.6 ms per scan, wall).
 *
 * The arithmetic is the reference's, in the same order (the joint events enumerated in the same
 * order, NumPy's pairwise summation where NumPy sums with it, JPDA*'s event keys from the same
 * random codes, NaN and infinities propagated as NumPy's maximum, minimum and sums do), so the
 * marginals agree to the last bit or two (exp from the C library rather than NumPy's).
 *
 *   marginals(t_loc, m_loc, log_g, n_tracks, n_meas, log_w0, star, max_cluster, max_events,
 *             codes, beta, beta0, rank_g=None) -> (clusters, fallbacks)
 *
 * t_loc, m_loc (int64, K): each gated pair's track (0..n_tracks-1) and detection
 * (0..n_meas-1); log_g (float64, K): its ln g; log_w0: ln(1 - p_d p_g), a miss's weight; star:
 * JPDA*; max_cluster, max_events: the most tracks and joint events (Π (n_t + 1)) a cluster may
 * have for exact enumeration, larger clusters take Fitzgerald's cheap JPDA; codes (uint64, at
 * least n_meas + the largest exact cluster's tracks): JPDA*'s random codes. Writes β of each pair
 * into beta (float64, K) and β_t0 of each track into beta0 (float64, n_tracks: 1 for a track
 * without a pair). rank_g (float64, K, or None for log_g itself): the ln g by which JPDA* ranks
 * the events of one key, the one it keeps weighing by log_g. Returns the clusters of two tracks
 * or more and those of them solved by the cheap JPDA. The GIL is released while it computes.
 *
 *   unique_inverse(x, uniq, inverse) -> count
 *   components(t, m, n_t, n_m, label)
 *
 * The association's two index helpers (`associators.small_unique` and
 * `associators.bipartite_components`, their NumPy code the reference, the same results), called
 * 6-8 times a scan on a few dozen indices: described where they are defined.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(Py_ssize_t) == sizeof(int64_t), "int64 index arrays as Py_ssize_t");

#define CHEAP_LOG_G_MAX 700.0 /* the cheap JPDA clips ln g here: its sums stay finite */
#define PAIRWISE_BLOCK 128    /* NumPy's PW_BLOCKSIZE */

/* NumPy's pairwise summation (loops_utils.h), the sum of `np.sum` over a contiguous row and of
 * `np.add.reduceat` past a segment's first element: the same result to the bit. */
static double
pairwise_sum(const double *a, Py_ssize_t n)
{
    if (n < 8) {
        double res = -0.0;
        for (Py_ssize_t i = 0; i < n; i++)
            res += a[i];
        return res;
    }
    if (n <= PAIRWISE_BLOCK) {
        double r[8];
        Py_ssize_t i;
        for (i = 0; i < 8; i++)
            r[i] = a[i];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += a[i];
        return res;
    }
    Py_ssize_t half = n / 2;
    half -= half % 8;
    return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

/* NumPy's maximum: NaN wins. */
static inline double
nan_max(double top, double x)
{
    return (isnan(x) || x > top) ? x : top;
}

typedef struct {
    const int64_t *t_loc, *m_loc;
    const double *log_g, *rank_g; /* rank_g: JPDA*'s ranking of the events of one key */
    const uint64_t *codes;
    Py_ssize_t n_pairs, n_tracks, n_meas, n_codes, max_cluster;
    double log_w0, max_events;
    int star;
    double *beta, *beta0;
} Problem;

/* One level of partial joint events of a cluster of `width` tracks: each event's ln weight so
 * far and JPDA*'s ranking of it (the same sum over rank_g), JPDA* key, and per track its pair
 * (-1: missed) and detection (-1 - t: missed). */
typedef struct {
    Py_ssize_t count, width, cap, row_cap;
    double *part, *rank;
    uint64_t *key;
    int64_t *sel, *det;
} Events;

typedef struct {
    Py_ssize_t *parent;      /* n_tracks: union-find over tracks sharing a detection */
    Py_ssize_t *first_track; /* n_meas: the first track seen with each detection */
    Py_ssize_t *pair_start;  /* n_tracks + 1: each track's pairs ... */
    Py_ssize_t *pairs;       /* n_pairs: ... in pair order */
    Py_ssize_t *comp_start;  /* n_tracks + 1: each component's tracks (by smallest track) ... */
    Py_ssize_t *members;     /* n_tracks: ... in track order */
    double *s_meas;          /* n_meas: the cheap JPDA's column sums */
    double *row;             /* an exact cluster's tracks: one event's ln weights */
    Events level[2];
    Py_ssize_t *slot; /* JPDA*'s hash table of keys: the likeliest event of each */
    char *keep;       /* per event: the likeliest of its key so far */
    Py_ssize_t slot_cap, keep_cap;
} Work;

static void
events_free(Events *ev)
{
    PyMem_RawFree(ev->part);
    PyMem_RawFree(ev->rank);
    PyMem_RawFree(ev->key);
    PyMem_RawFree(ev->sel);
    PyMem_RawFree(ev->det);
    memset(ev, 0, sizeof(*ev));
}

/* Room for `cap` events of `width` tracks, what it held lost when it grows (by half again at
 * least: the levels of a cluster, and the clusters of a call, share the buffers); 0 when out of
 * memory. */
static int
events_reserve(Events *ev, Py_ssize_t cap, Py_ssize_t width)
{
    if (cap > PY_SSIZE_T_MAX / (width * (Py_ssize_t)sizeof(int64_t)))
        return 0;
    if (cap > ev->cap || cap * width > ev->row_cap) {
        cap = cap > ev->cap + ev->cap / 2 ? cap : ev->cap + ev->cap / 2;
        if (cap > PY_SSIZE_T_MAX / (width * (Py_ssize_t)sizeof(int64_t)))
            return 0;
        events_free(ev);
        ev->part = PyMem_RawMalloc(cap * sizeof(double));
        ev->rank = PyMem_RawMalloc(cap * sizeof(double));
        ev->key = PyMem_RawMalloc(cap * sizeof(uint64_t));
        ev->sel = PyMem_RawMalloc(cap * width * sizeof(int64_t));
        ev->det = PyMem_RawMalloc(cap * width * sizeof(int64_t));
        if (!ev->part || !ev->rank || !ev->key || !ev->sel || !ev->det) {
            events_free(ev);
            return 0;
        }
        ev->cap = cap;
        ev->row_cap = cap * width;
    }
    ev->count = 0;
    ev->width = width;
    return 1;
}

static void
work_free(Work *w)
{
    PyMem_RawFree(w->parent);
    PyMem_RawFree(w->first_track);
    PyMem_RawFree(w->pair_start);
    PyMem_RawFree(w->pairs);
    PyMem_RawFree(w->comp_start);
    PyMem_RawFree(w->members);
    PyMem_RawFree(w->s_meas);
    PyMem_RawFree(w->row);
    events_free(&w->level[0]);
    events_free(&w->level[1]);
    PyMem_RawFree(w->slot);
    PyMem_RawFree(w->keep);
}

static Py_ssize_t
find_root(Py_ssize_t *parent, Py_ssize_t x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

/* A lone track: β_tj = g_tj / (w0 + Σ_j g_tj), in logs (the reference's `_single`). */
static void
solve_single(const Problem *pb, const Py_ssize_t *pairs, Py_ssize_t n, Py_ssize_t track)
{
    double top = pb->log_w0;
    for (Py_ssize_t i = 0; i < n; i++)
        top = nan_max(top, pb->log_g[pairs[i]]);
    double miss = exp(pb->log_w0 - top);
    double total = miss;
    for (Py_ssize_t i = 0; i < n; i++)
        total += exp(pb->log_g[pairs[i]] - top);
    for (Py_ssize_t i = 0; i < n; i++)
        pb->beta[pairs[i]] = exp(pb->log_g[pairs[i]] - top) / total;
    pb->beta0[track] = miss / total;
}

/* Fitzgerald's cheap JPDA of one cluster (the reference's `_cheap`). */
static void
solve_cheap(const Problem *pb, Work *w, const Py_ssize_t *members, Py_ssize_t T)
{
    for (Py_ssize_t i = 0; i < T; i++)
        for (Py_ssize_t k = w->pair_start[members[i]]; k < w->pair_start[members[i] + 1]; k++)
            w->s_meas[pb->m_loc[w->pairs[k]]] = 0.0;
    /* g (w0 = 1) into beta first, the row sums S_t into beta0 */
    for (Py_ssize_t i = 0; i < T; i++) {
        double s_track = 0.0;
        for (Py_ssize_t k = w->pair_start[members[i]]; k < w->pair_start[members[i] + 1]; k++) {
            Py_ssize_t p = w->pairs[k];
            double x = pb->log_g[p] - pb->log_w0;
            double g = exp(x > CHEAP_LOG_G_MAX ? CHEAP_LOG_G_MAX : x);
            pb->beta[p] = g;
            s_track += g;
            w->s_meas[pb->m_loc[p]] += g;
        }
        pb->beta0[members[i]] = s_track;
    }
    for (Py_ssize_t i = 0; i < T; i++) {
        double s_track = pb->beta0[members[i]];
        double b0 = 1.0 / (1.0 + s_track);
        double sum = 0.0;
        for (Py_ssize_t k = w->pair_start[members[i]]; k < w->pair_start[members[i] + 1]; k++) {
            Py_ssize_t p = w->pairs[k];
            double g = pb->beta[p];
            double b = g / (1.0 + s_track + w->s_meas[pb->m_loc[p]] - g);
            pb->beta[p] = b;
            sum += b;
        }
        double total = sum + b0;
        double scale = 1.0 / total;
        for (Py_ssize_t k = w->pair_start[members[i]]; k < w->pair_start[members[i] + 1]; k++)
            pb->beta[w->pairs[k]] *= scale;
        pb->beta0[members[i]] = b0 / total;
    }
}

/* JPDA*: of the events with the same key (the same detections used, the same tracks missed),
 * keep the likeliest by their ranking, the first of equals (NaN last), the survivors in their
 * order: the reference's stable sort by key and ranking. 0 when out of memory. */
static int
keep_likeliest(Work *w, Events *ev)
{
    Py_ssize_t n = ev->count, size = 16;
    while (size < 2 * n)
        size *= 2;
    if (size > w->slot_cap) {
        PyMem_RawFree(w->slot);
        w->slot = PyMem_RawMalloc(size * sizeof(Py_ssize_t));
        w->slot_cap = w->slot ? size : 0;
    }
    if (n > w->keep_cap) {
        PyMem_RawFree(w->keep);
        w->keep = PyMem_RawMalloc(n);
        w->keep_cap = w->keep ? n : 0;
    }
    if (!w->slot || !w->keep)
        return 0;
    size_t mask = (size_t)size - 1;
    for (Py_ssize_t i = 0; i < size; i++)
        w->slot[i] = -1;
    for (Py_ssize_t e = 0; e < n; e++) {
        uint64_t key = ev->key[e];
        size_t h = (size_t)(key ^ (key >> 32)) & mask;
        while (w->slot[h] >= 0 && ev->key[w->slot[h]] != key)
            h = (h + 1) & mask;
        Py_ssize_t best = w->slot[h];
        if (best < 0) {
            w->slot[h] = e;
            w->keep[e] = 1;
            continue;
        }
        double now = ev->rank[best], cand = ev->rank[e];
        if ((isnan(now) && !isnan(cand)) || cand > now) {
            w->keep[best] = 0;
            w->keep[e] = 1;
            w->slot[h] = e;
        }
        else
            w->keep[e] = 0;
    }
    Py_ssize_t out = 0, width = ev->width;
    for (Py_ssize_t e = 0; e < n; e++) {
        if (!w->keep[e])
            continue;
        if (out != e) {
            ev->part[out] = ev->part[e];
            ev->rank[out] = ev->rank[e];
            ev->key[out] = ev->key[e];
            memcpy(ev->sel + out * width, ev->sel + e * width, width * sizeof(int64_t));
            memcpy(ev->det + out * width, ev->det + e * width, width * sizeof(int64_t));
        }
        out++;
    }
    ev->count = out;
    return 1;
}

/* Every joint event of one cluster of T tracks, grown track by track
 * as the reference's `_exact_group` grows them: each partial event extended by a miss, then by
 * each of the track's detections (in pair order) that no earlier track of it took. 0 when out
 * of memory. */
static int
solve_exact(const Problem *pb, Work *w, const Py_ssize_t *members, Py_ssize_t T)
{
    Events *cur = &w->level[0], *next = &w->level[1];
    if (!events_reserve(cur, 1, T))
        return 0;
    cur->count = 1;
    cur->part[0] = cur->rank[0] = 0.0;
    cur->key[0] = 0; /* the reference adds its cluster's code: the same keys compare equal */
    for (Py_ssize_t t = 0; t < T; t++) {
        const Py_ssize_t *pairs = w->pairs + w->pair_start[members[t]];
        Py_ssize_t n_pairs = w->pair_start[members[t] + 1] - w->pair_start[members[t]];
        Py_ssize_t n = 0;
        /* at most Π (n_t + 1) <= max_events */
        if (!events_reserve(next, cur->count * (n_pairs + 1), T))
            return 0;
        for (Py_ssize_t r = 0; r < cur->count; r++) {
            const int64_t *det = cur->det + r * T;
            for (Py_ssize_t c = -1; c < n_pairs; c++) {
                int64_t pair = c < 0 ? -1 : pairs[c];
                int64_t got = c < 0 ? -1 - t : pb->m_loc[pair];
                if (c >= 0) {
                    Py_ssize_t s = 0;
                    while (s < t && det[s] != got)
                        s++;
                    if (s < t)
                        continue; /* an earlier track took this detection */
                }
                memcpy(next->sel + n * T, cur->sel + r * T, t * sizeof(int64_t));
                memcpy(next->det + n * T, det, t * sizeof(int64_t));
                next->sel[n * T + t] = pair;
                next->det[n * T + t] = got;
                next->part[n] = cur->part[r] + (c < 0 ? pb->log_w0 : pb->log_g[pair]);
                next->rank[n] = cur->rank[r] + (c < 0 ? pb->log_w0 : pb->rank_g[pair]);
                if (pb->star)
                    next->key[n] = cur->key[r] + pb->codes[got + T];
                n++;
            }
        }
        next->count = n;
        if (pb->star && t > 0 && !keep_likeliest(w, next))
            return 0;
        Events *swap = cur;
        cur = next;
        next = swap;
    }
    /* p ∝ exp(ln w), normalised within the cluster; `part` is reused for p */
    Py_ssize_t n = cur->count;
    double top = -INFINITY;
    for (Py_ssize_t e = 0; e < n; e++) {
        const int64_t *sel = cur->sel + e * T;
        for (Py_ssize_t t = 0; t < T; t++)
            w->row[t] = sel[t] < 0 ? pb->log_w0 : pb->log_g[sel[t]];
        cur->part[e] = pairwise_sum(w->row, T);
        top = nan_max(top, cur->part[e]);
    }
    for (Py_ssize_t e = 0; e < n; e++)
        cur->part[e] = exp(cur->part[e] - top);
    double total = cur->part[0] + pairwise_sum(cur->part + 1, n - 1);
    for (Py_ssize_t e = 0; e < n; e++)
        cur->part[e] /= total;
    for (Py_ssize_t t = 0; t < T; t++)
        pb->beta0[members[t]] = 0.0;
    for (Py_ssize_t e = 0; e < n; e++) {
        const int64_t *sel = cur->sel + e * T;
        for (Py_ssize_t t = 0; t < T; t++) {
            if (sel[t] < 0)
                pb->beta0[members[t]] += cur->part[e];
            else
                pb->beta[sel[t]] += cur->part[e];
        }
    }
    return 1;
}

/* The tracks' components, then each solved. Returns 0, or -1 when out of memory. */
static int
solve(const Problem *pb, Work *w, Py_ssize_t *clusters, Py_ssize_t *fallbacks)
{
    Py_ssize_t K = pb->n_pairs, NT = pb->n_tracks;
    Py_ssize_t widest = pb->max_cluster < NT ? pb->max_cluster : NT; /* exact cluster */
    w->parent = PyMem_RawMalloc((NT + 1) * sizeof(Py_ssize_t));
    w->first_track = PyMem_RawMalloc((pb->n_meas + 1) * sizeof(Py_ssize_t));
    w->pair_start = PyMem_RawCalloc(NT + 2, sizeof(Py_ssize_t));
    w->pairs = PyMem_RawMalloc((K + 1) * sizeof(Py_ssize_t));
    w->comp_start = PyMem_RawCalloc(NT + 2, sizeof(Py_ssize_t));
    w->members = PyMem_RawMalloc((NT + 1) * sizeof(Py_ssize_t));
    w->s_meas = PyMem_RawMalloc((pb->n_meas + 1) * sizeof(double));
    w->row = PyMem_RawMalloc((widest + 1) * sizeof(double));
    if (!w->parent || !w->first_track || !w->pair_start || !w->pairs || !w->comp_start ||
        !w->members || !w->s_meas || !w->row)
        return -1;
    for (Py_ssize_t k = 0; k < K; k++)
        pb->beta[k] = 0.0;
    for (Py_ssize_t t = 0; t < NT; t++) {
        pb->beta0[t] = 1.0;
        w->parent[t] = t;
    }
    /* Components: union-find, each rooted at its smallest track (the reference's label). */
    for (Py_ssize_t m = 0; m < pb->n_meas; m++)
        w->first_track[m] = -1;
    for (Py_ssize_t k = 0; k < K; k++) {
        Py_ssize_t t = pb->t_loc[k], m = pb->m_loc[k];
        if (w->first_track[m] < 0) {
            w->first_track[m] = t;
            continue;
        }
        Py_ssize_t a = find_root(w->parent, t), b = find_root(w->parent, w->first_track[m]);
        if (a < b)
            w->parent[b] = a;
        else if (b < a)
            w->parent[a] = b;
    }
    /* Each track's pairs, and each component's tracks, in order (counting sorts). */
    for (Py_ssize_t k = 0; k < K; k++)
        w->pair_start[pb->t_loc[k] + 1]++;
    for (Py_ssize_t t = 0; t < NT; t++) {
        w->pair_start[t + 1] += w->pair_start[t];
        w->parent[t] = find_root(w->parent, t);
        w->comp_start[w->parent[t] + 1]++;
    }
    for (Py_ssize_t t = 0; t < NT; t++)
        w->comp_start[t + 1] += w->comp_start[t];
    /* fill from the counts' starts, shifted back after */
    for (Py_ssize_t k = 0; k < K; k++)
        w->pairs[w->pair_start[pb->t_loc[k]]++] = k;
    for (Py_ssize_t t = 0; t < NT; t++)
        w->members[w->comp_start[w->parent[t]]++] = t;
    for (Py_ssize_t t = NT; t > 0; t--) {
        w->pair_start[t] = w->pair_start[t - 1];
        w->comp_start[t] = w->comp_start[t - 1];
    }
    w->pair_start[0] = w->comp_start[0] = 0;

    for (Py_ssize_t root = 0; root < NT; root++) {
        const Py_ssize_t *members = w->members + w->comp_start[root];
        Py_ssize_t T = w->comp_start[root + 1] - w->comp_start[root];
        if (T == 0)
            continue;
        if (T == 1) {
            Py_ssize_t t = members[0], n = w->pair_start[t + 1] - w->pair_start[t];
            if (n)
                solve_single(pb, w->pairs + w->pair_start[t], n, t);
            continue;
        }
        ++*clusters;
        double events = 1.0; /* Π (n_t + 1), exact below 2^53 as the reference's */
        for (Py_ssize_t i = 0; i < T; i++)
            events *= (double)(w->pair_start[members[i] + 1] - w->pair_start[members[i]] + 1);
        if (T <= pb->max_cluster && events <= pb->max_events) {
            if (!solve_exact(pb, w, members, T))
                return -1;
        }
        else {
            ++*fallbacks;
            solve_cheap(pb, w, members, T);
        }
    }
    return 0;
}

/* A C-contiguous buffer of `n` items of one of the `formats` (8 bytes each); 0 with an
 * exception set when it is not. */
static int
get_array(PyObject *obj, Py_buffer *view, const char *name, const char *formats, Py_ssize_t n,
          int writable)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return 0;
    const char *fmt = view->format ? view->format : "B";
    if (*fmt == '=' || *fmt == '@' || *fmt == '<')
        fmt++;
    if (view->ndim != 1 || view->itemsize != 8 || strlen(fmt) != 1 || !strchr(formats, *fmt)) {
        PyErr_Format(PyExc_TypeError, "%s must be a 1-D contiguous array of 8-byte '%s' items",
                     name, formats);
        PyBuffer_Release(view);
        return 0;
    }
    if (n >= 0 && view->shape[0] != n) {
        PyErr_Format(PyExc_ValueError, "%s has %zd items, not %zd", name, view->shape[0], n);
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

static PyObject *
jpda_marginals(PyObject *self, PyObject *args)
{
    PyObject *o_t, *o_m, *o_g, *o_codes, *o_beta, *o_beta0, *o_rank = Py_None;
    Problem pb = {0};
    if (!PyArg_ParseTuple(args, "OOOnndpndOOO|O:marginals", &o_t, &o_m, &o_g, &pb.n_tracks,
                          &pb.n_meas, &pb.log_w0, &pb.star, &pb.max_cluster, &pb.max_events,
                          &o_codes, &o_beta, &o_beta0, &o_rank))
        return NULL;
    if (pb.n_tracks < 0 || pb.n_meas < 0 || pb.max_cluster < 0) {
        PyErr_SetString(PyExc_ValueError, "n_tracks, n_meas and max_cluster must be >= 0");
        return NULL;
    }
    /* JPDA*'s keys index the codes by detection + the cluster's tracks */
    Py_ssize_t exact_tracks = pb.max_cluster < pb.n_tracks ? pb.max_cluster : pb.n_tracks;
    Py_buffer views[7];
    int held = 0, n_views = o_rank == Py_None ? 6 : 7;
    PyObject *result = NULL;
    Work w = {0};
    Py_ssize_t clusters = 0, fallbacks = 0;
    int rc;
    /* t_loc, m_loc, log_g, codes, beta, beta0 (these two written), rank_g */
    PyObject *objs[7] = {o_t, o_m, o_g, o_codes, o_beta, o_beta0, o_rank};
    static const char *names[7] = {"t_loc", "m_loc", "log_g", "codes", "beta", "beta0", "rank_g"};
    static const char *formats[7] = {"lq", "lq", "d", "LQ", "d", "d", "d"};
    for (; held < n_views; held++) {
        Py_ssize_t n = held == 0 || held == 3 ? -1 : held == 5 ? pb.n_tracks : pb.n_pairs;
        int written = held == 4 || held == 5;
        if (!get_array(objs[held], &views[held], names[held], formats[held], n, written))
            goto done;
        if (held == 0)
            pb.n_pairs = views[0].shape[0];
    }
    pb.rank_g = n_views == 7 ? views[6].buf : views[2].buf;
    pb.t_loc = views[0].buf;
    pb.m_loc = views[1].buf;
    pb.log_g = views[2].buf;
    pb.codes = views[3].buf;
    pb.n_codes = views[3].shape[0];
    pb.beta = views[4].buf;
    pb.beta0 = views[5].buf;
    for (Py_ssize_t k = 0; k < pb.n_pairs; k++) {
        if (pb.t_loc[k] < 0 || pb.t_loc[k] >= pb.n_tracks || pb.m_loc[k] < 0 ||
            pb.m_loc[k] >= pb.n_meas) {
            PyErr_Format(PyExc_ValueError,
                         "pair %zd: track %lld or detection %lld out of range (%zd, %zd)", k,
                         (long long)pb.t_loc[k], (long long)pb.m_loc[k], pb.n_tracks, pb.n_meas);
            goto done;
        }
    }
    if (pb.star && pb.n_codes < pb.n_meas + exact_tracks) {
        PyErr_Format(PyExc_ValueError, "codes has %zd items, JPDA* needs %zd", pb.n_codes,
                     pb.n_meas + exact_tracks);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = solve(&pb, &w, &clusters, &fallbacks);
    work_free(&w);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_NoMemory();
    else
        result = Py_BuildValue("nn", clusters, fallbacks);
done:
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    return result;
}

/* associators.small_unique: the distinct values of x (int64, >= 0) in increasing order into
 * uniq (their count returned) and each item's index among them into inverse, by a table of
 * the values seen (the reference's method, so the same result). */
static PyObject *
jpda_unique_inverse(PyObject *self, PyObject *args)
{
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO:unique_inverse", &o[0], &o[1], &o[2]))
        return NULL;
    static const char *names[3] = {"x", "uniq", "inverse"};
    Py_buffer v[3];
    int held = 0;
    PyObject *result = NULL;
    int64_t *slot = NULL; /* per value: -1 unseen, else its index among the distinct */
    for (; held < 3; held++)
        if (!get_array(o[held], &v[held], names[held], "lq", -1, held >= 1))
            goto done;
    const int64_t *x = v[0].buf;
    int64_t *uniq = v[1].buf, *inv = v[2].buf;
    Py_ssize_t k = v[0].shape[0];
    if (v[1].shape[0] < k || v[2].shape[0] != k) {
        PyErr_SetString(PyExc_ValueError, "unique_inverse: uniq and inverse must hold x");
        goto done;
    }
    int64_t top = -1;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (x[i] < 0) {
            PyErr_Format(PyExc_ValueError, "unique_inverse: negative value %lld",
                         (long long)x[i]);
            goto done;
        }
        if (x[i] > top)
            top = x[i];
    }
    Py_ssize_t out = 0;
    if (k) {
        slot = malloc(((size_t)top + 1) * sizeof(int64_t));
        if (!slot) {
            PyErr_NoMemory();
            goto done;
        }
        for (int64_t value = 0; value <= top; value++)
            slot[value] = -1;
        for (Py_ssize_t i = 0; i < k; i++)
            slot[x[i]] = 0;
        for (int64_t value = 0; value <= top; value++)
            if (slot[value] == 0) {
                slot[value] = out;
                uniq[out++] = value;
            }
        for (Py_ssize_t i = 0; i < k; i++)
            inv[i] = slot[x[i]];
    }
    result = PyLong_FromSsize_t(out);
done:
    free(slot);
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&v[i]);
    return result;
}

/* associators.bipartite_components: for each of n_t tracks, the smallest track index of its
 * connected component in the bipartite graph of edges (t[k], m[k]), into label (int64, n_t).
 * Union-find keeping the smallest index as each set's root: the fixed point that the
 * reference's label propagation reaches. */
static PyObject *
jpda_components(PyObject *self, PyObject *args)
{
    PyObject *o[3];
    Py_ssize_t n_t, n_m;
    if (!PyArg_ParseTuple(args, "OOnnO:components", &o[0], &o[1], &n_t, &n_m, &o[2]))
        return NULL;
    static const char *names[3] = {"t", "m", "label"};
    Py_buffer v[3];
    int held = 0;
    PyObject *result = NULL;
    int64_t *first = NULL;
    if (n_t < 0 || n_m < 0) {
        PyErr_SetString(PyExc_ValueError, "components: n_t and n_m must be >= 0");
        return NULL;
    }
    for (; held < 3; held++)
        if (!get_array(o[held], &v[held], names[held], "lq", held == 2 ? n_t : -1, held == 2))
            goto done;
    const int64_t *t = v[0].buf, *m = v[1].buf;
    int64_t *label = v[2].buf;
    Py_ssize_t *root = (Py_ssize_t *)label; /* the labels are the union-find's parents */
    Py_ssize_t k = v[0].shape[0];
    if (v[1].shape[0] != k) {
        PyErr_SetString(PyExc_ValueError, "components: t and m must have one item per edge");
        goto done;
    }
    for (Py_ssize_t i = 0; i < k; i++)
        if (t[i] < 0 || t[i] >= n_t || m[i] < 0 || m[i] >= n_m) {
            PyErr_Format(PyExc_IndexError, "components: edge %zd (%lld, %lld) out of range", i,
                         (long long)t[i], (long long)m[i]);
            goto done;
        }
    first = malloc(((size_t)n_m + 1) * sizeof(int64_t)); /* a track of each detection's set */
    if (!first) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < n_m; j++)
        first[j] = -1;
    for (Py_ssize_t i = 0; i < n_t; i++)
        label[i] = i;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (first[m[i]] < 0) {
            first[m[i]] = t[i];
            continue;
        }
        int64_t a = find_root(root, t[i]), b = find_root(root, first[m[i]]);
        if (a < b)
            label[b] = a;
        else if (b < a)
            label[a] = b;
    }
    for (Py_ssize_t i = 0; i < n_t; i++)
        label[i] = find_root(root, i);
    result = Py_NewRef(Py_None);
done:
    free(first);
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&v[i]);
    return result;
}

static PyMethodDef jpda_methods[] = {
    {"marginals", jpda_marginals, METH_VARARGS,
     "marginals(t_loc, m_loc, log_g, n_tracks, n_meas, log_w0, star, max_cluster, max_events, "
     "codes, beta, beta0) -> (clusters, fallbacks): the JPDA marginals of every cluster of one "
     "scan's gated pairs into beta and beta0 (the module's comment)."},
    {"unique_inverse", jpda_unique_inverse, METH_VARARGS,
     "unique_inverse(x, uniq, inverse) -> count: associators.small_unique into uniq[:count] and "
     "inverse."},
    {"components", jpda_components, METH_VARARGS,
     "components(t, m, n_t, n_m, label): associators.bipartite_components into label."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef jpda_module = {
    PyModuleDef_HEAD_INIT, "mcc.tracking._jpda",
    "JPDA association marginals of one scan, every cluster in one call (C).", -1, jpda_methods,
};

PyMODINIT_FUNC
PyInit__jpda(void)
{
    return PyModule_Create(&jpda_module);
}
