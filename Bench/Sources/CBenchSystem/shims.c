#define _GNU_SOURCE
#include "CBenchSystem.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int bench_gettid(void) { return (int)gettid(); }

int bench_epoll_pwait2(int epfd, const struct timespec *timeout) {
#ifdef SYS_epoll_pwait2
    struct epoll_event event;
    long n = syscall(SYS_epoll_pwait2, epfd, &event, 1, timeout, NULL, 0);
    return n < 0 ? -errno : (int)n;
#else
    (void)epfd; (void)timeout;
    return -ENOSYS;
#endif
}

int bench_set_timer_slack(unsigned long nanoseconds) {
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0) == 0 ? 0 : -errno;
}
