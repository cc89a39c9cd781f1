/* zerotrain: the hang diagnosis. From each rank's stall report (the collective it waits in,
 * engine/comm/comm.h) it names the ranks that stopped, where the others wait, and for whom:
 *   hang: rank 1 stopped in backward at step 14 (last collective reduce_scatter #611);
 *   ranks 0, 2, 3 wait in allgather #612 for rank 1
 * zcoord writes it as the attempt's end reason; zctl run prints it when a collective times
 * out. Pure functions; thread-safe. */
#ifndef ZT_COMMON_HANGDIAG_H
#define ZT_COMMON_HANGDIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A rank's stall report: it computes step `step`, in `part`, and has waited waited_ms in
 * collective op #seq; the one before was prev_op #prev_seq ("none", 0 before the first). */
typedef struct zt_hang_wait {
    bool waiting;
    char op[24], part[24], prev_op[24];
    int64_t seq, step, prev_seq, waited_ms;
} zt_hang_wait;

typedef struct zt_hang_rank {
    int rank;
    int64_t step; /* the last step the rank finished (its step reports) */
    int64_t seq;  /* the last collective it finished by then (0: unknown) */
    zt_hang_wait wait;
} zt_hang_rank;

/* Writes the diagnosis of n ranks (in rank order or not) into buf (always NUL-terminated,
 * cut at cap) and returns its length. Ranks that report no wait are the ones that stopped
 * (SIGSTOP, a compute loop, a dead device); where every rank waits, the collectives they wait
 * in are listed; where none does, their steps are. */
size_t zt_hang_describe(const zt_hang_rank *r, int n, char *buf, size_t cap);

#endif
