/* zerotrain: clocks. Monotonic for durations and deadlines, wall for records. */
#ifndef ZT_COMMON_TIMEUTIL_H
#define ZT_COMMON_TIMEUTIL_H

#include <stdint.h>

/* Monotonic nanoseconds (CLOCK_MONOTONIC). */
uint64_t zt_now_ns(void);
/* Monotonic seconds as double. */
double zt_now_s(void);
/* Wall-clock milliseconds since the Unix epoch. */
int64_t zt_wall_ms(void);
/* Sleeps for ms milliseconds (restarts on EINTR). */
void zt_sleep_ms(int64_t ms);

#endif
