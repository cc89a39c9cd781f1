/* zerotrain: the hang diagnosis (see hangdiag.h). */
#include "common/hangdiag.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/alloc.h"
#include <string.h>

typedef struct out {
    char *buf;
    size_t cap, len;
} out;

static void put(out *o, const char *fmt, ...)
{
    if (o->len + 1 >= o->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    o->len += (size_t)n < o->cap - o->len ? (size_t)n : o->cap - o->len - 1;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* "rank 3" / "ranks 0, 2, 5-9"; ids sorted in place. */
static void put_ranks(out *o, int *ids, int k)
{
    qsort(ids, (size_t)k, sizeof(*ids), cmp_int);
    put(o, k == 1 ? "rank " : "ranks ");
    for (int i = 0; i < k;) {
        int j = i;
        while (j + 1 < k && ids[j + 1] == ids[j] + 1)
            j++;
        put(o, "%s", i ? ", " : "");
        if (j - i >= 2)
            put(o, "%d-%d", ids[i], ids[j]);
        else if (j == i + 1)
            put(o, "%d, %d", ids[i], ids[j]);
        else
            put(o, "%d", ids[i]);
        i = j + 1;
    }
}

/* The distinct collectives (by seq) the waiting ranks wait in, ascending. */
static int wait_groups(const zt_hang_rank *r, int n, int64_t *seqs)
{
    int g = 0;
    for (int i = 0; i < n; i++) {
        if (!r[i].wait.waiting) continue;
        bool seen = false;
        for (int k = 0; k < g && !seen; k++)
            seen = seqs[k] == r[i].wait.seq;
        if (!seen) seqs[g++] = r[i].wait.seq;
    }
    for (int a = 1; a < g; a++)
        for (int b = a; b > 0 && seqs[b - 1] > seqs[b]; b--) {
            int64_t t = seqs[b];
            seqs[b] = seqs[b - 1];
            seqs[b - 1] = t;
        }
    return g;
}

/* "; ranks 0, 2 wait in allgather #612" for every group; ids is scratch of n ints. */
static void put_groups(out *o, const zt_hang_rank *r, int n, const int64_t *seqs, int g, int *ids,
                       const char *sep)
{
    for (int k = 0; k < g; k++) {
        int m = 0;
        const zt_hang_wait *w = NULL;
        for (int i = 0; i < n; i++)
            if (r[i].wait.waiting && r[i].wait.seq == seqs[k]) {
                ids[m++] = r[i].rank;
                w = &r[i].wait;
            }
        put(o, "%s", k ? sep : "");
        put_ranks(o, ids, m);
        put(o, " %s in %s #%lld", m == 1 ? "waits" : "wait", w->op, (long long)w->seq);
    }
}

size_t zt_hang_describe(const zt_hang_rank *r, int n, char *buf, size_t cap)
{
    if (!buf || cap == 0) return 0;
    buf[0] = '\0';
    out o = {buf, cap, 0};
    int *ids = n > 0 ? zt_malloc((size_t)n * sizeof(*ids)) : NULL;
    int64_t *seqs = n > 0 ? zt_malloc((size_t)n * sizeof(*seqs)) : NULL;
    if (n <= 0 || !ids || !seqs) {
        put(&o, "hang: no rank reported where it is");
        goto done;
    }
    int g = wait_groups(r, n, seqs);
    int stopped = 0;
    for (int i = 0; i < n; i++)
        if (!r[i].wait.waiting) ids[stopped++] = r[i].rank;
    if (g == 0) {
        /* no stall reports: every rank computes (or reports are off); say where they are */
        put(&o, "hang: no rank waits in a collective; last steps finished:");
        for (int i = 0; i < n && o.len + 48 < o.cap; i++) {
            put(&o, "%s rank %d step %lld", i ? "," : "", r[i].rank, (long long)r[i].step);
            if (r[i].seq > 0) put(&o, " (collective #%lld)", (long long)r[i].seq);
        }
        goto done;
    }
    /* where the stopped ranks are: the point of the program the lowest waited collective
     * belongs to (every rank issues the same collectives in the same order) */
    const zt_hang_wait *first = NULL;
    for (int i = 0; i < n; i++)
        if (r[i].wait.waiting && r[i].wait.seq == seqs[0]) first = &r[i].wait;
    if (stopped > 0) {
        put(&o, "hang: ");
        put_ranks(&o, ids, stopped);
        put(&o, " stopped in %s at step %lld", first->part, (long long)first->step);
        if (first->prev_seq > 0)
            put(&o, " (last collective %s #%lld)", first->prev_op, (long long)first->prev_seq);
        put(&o, "; ");
        int stopped_ids[8];
        int ns = stopped < 8 ? stopped : 8;
        memcpy(stopped_ids, ids, (size_t)ns * sizeof(int));
        put_groups(&o, r, n, seqs, g, ids, "; ");
        put(&o, " for ");
        put_ranks(&o, stopped_ids, ns);
        if (stopped > ns) put(&o, " and %d more", stopped - ns);
    } else if (g == 1) {
        put(&o, "hang: every rank waits in %s #%lld (step %lld, %s): the collective itself does not progress (network, or a device that stopped)",
            first->op, (long long)first->seq, (long long)first->step, first->part);
    } else {
        put(&o, "hang: every rank waits, in different collectives: ");
        put_groups(&o, r, n, seqs, g, ids, "; ");
        put(&o, " (the ranks disagree about the order of collectives)");
    }
done:
    zt_free(ids);
    zt_free(seqs);
    return o.len;
}
