#define _GNU_SOURCE
#include "CTimerShims.h"

#include <errno.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int ctk_epoll_add(int epfd, int fd, uint32_t events, uint64_t token) {
    struct epoll_event event = { .events = events, .data = { .u64 = token } };
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) == 0 ? 0 : -errno;
}

int ctk_epoll_wait(int epfd, uint64_t *tokens, int max_tokens, int timeout_ms) {
    struct epoll_event events[16];
    if (max_tokens > 16) max_tokens = 16;
    int n = epoll_wait(epfd, events, max_tokens, timeout_ms);
    if (n < 0) return -errno;
    for (int i = 0; i < n; i++) tokens[i] = events[i].data.u64;
    return n;
}

int ctk_epoll_pwait2(int epfd, uint64_t *tokens, int max_tokens, const struct timespec *timeout) {
#ifdef SYS_epoll_pwait2
    struct epoll_event events[16];
    if (max_tokens > 16) max_tokens = 16;
    // The raw system call: glibc's wrapper is newer than some of the C libraries TimerKit
    // builds against, and the kernel's answer (ENOSYS before 5.11) is what callers ask for.
    long n = syscall(SYS_epoll_pwait2, epfd, events, max_tokens, timeout, NULL, 0);
    if (n < 0) return -errno;
    for (long i = 0; i < n; i++) tokens[i] = events[i].data.u64;
    return (int)n;
#else
    (void)epfd; (void)tokens; (void)max_tokens; (void)timeout;
    return -ENOSYS;
#endif
}

int ctk_set_timer_slack(unsigned long nanoseconds) {
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0) == 0 ? 0 : -errno;
}

long ctk_timer_slack(void) {
    int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    return slack >= 0 ? (long)slack : -errno;
}

int ctk_gettid(void) { return (int)gettid(); }

int ctk_set_thread_name(const char *name) {
    return -pthread_setname_np(pthread_self(), name);
}
