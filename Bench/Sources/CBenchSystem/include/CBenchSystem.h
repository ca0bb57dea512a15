#ifndef CBENCHSYSTEM_H
#define CBENCHSYSTEM_H

// What the bench needs of Linux that Glibc's Swift module leaves out: timerfd (the floor
// baselines and the timerfd-raw fan-out), mallinfo2 and malloc_trim (memory per timer), the
// kernel thread id (per-thread wake-up counts from /proc), and epoll_pwait2 (the pwait2-raw
// fan-out).
#include <sys/types.h>
#include <sys/timerfd.h>
#include <malloc.h>
#include <sys/epoll.h>
#include <time.h>

/// The kernel thread id of the calling thread (gettid is a GNU extension Glibc's module omits).
int bench_gettid(void);

/// epoll_pwait2 (Linux 5.11 and later) on `epfd` for up to one event, which is discarded:
/// `struct epoll_event` is packed and holds a union, which Swift does not import usably.
/// Returns the number of events, or -errno.
int bench_epoll_pwait2(int epfd, const struct timespec *timeout);

/// prctl(PR_SET_TIMERSLACK) for the calling thread (prctl is variadic, which Swift cannot call).
/// Returns 0, or -errno.
int bench_set_timer_slack(unsigned long nanoseconds);

#endif
