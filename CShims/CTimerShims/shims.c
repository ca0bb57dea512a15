#define _GNU_SOURCE
#include "CTimerShims.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
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

// The lock follows the three-state futex mutex of Drepper's "Futexes Are Tricky": a waiter
// marks the word 2 before sleeping, so an unlock that finds 1 knows no one sleeps and makes
// no system call.

static void futex_wait(uint32_t *word, uint32_t expected) {
    // EINTR, EAGAIN (the word changed before the wait): the caller looks again.
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(uint32_t *word, int count) {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

static void lock_contended(ctk_lock_t *lock) {
    uint32_t seen = __atomic_exchange_n(&lock->word, 2, __ATOMIC_ACQUIRE);
    while (seen != 0) {
        futex_wait(&lock->word, 2);
        seen = __atomic_exchange_n(&lock->word, 2, __ATOMIC_ACQUIRE);
    }
}

void ctk_lock(ctk_lock_t *lock) {
    uint32_t expected = 0;
    if (__atomic_compare_exchange_n(&lock->word, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
    lock_contended(lock);
}

int ctk_trylock(ctk_lock_t *lock) {
    uint32_t expected = 0;
    return __atomic_compare_exchange_n(&lock->word, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

void ctk_unlock(ctk_lock_t *lock) {
    if (__atomic_exchange_n(&lock->word, 0, __ATOMIC_RELEASE) == 2) futex_wake(&lock->word, 1);
}

void ctk_condition_wait(ctk_condition_t *condition, ctk_lock_t *lock) {
    // Counted before the sequence is read (both sequentially consistent, as the broadcast's
    // two steps are): a broadcast either sees this waiter and wakes it, or changed the
    // sequence before it was read, and so came before this wait began.
    __atomic_fetch_add(&condition->waiters, 1, __ATOMIC_SEQ_CST);
    uint32_t seen = __atomic_load_n(&condition->sequence, __ATOMIC_SEQ_CST);
    ctk_unlock(lock);
    futex_wait(&condition->sequence, seen);
    __atomic_fetch_sub(&condition->waiters, 1, __ATOMIC_RELAXED);
    // Taken as contended: threads woken with this one may be waiting for the lock too.
    lock_contended(lock);
}

void ctk_condition_broadcast(ctk_condition_t *condition) {
    __atomic_fetch_add(&condition->sequence, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&condition->waiters, __ATOMIC_SEQ_CST) != 0) futex_wake(&condition->sequence, INT_MAX);
}
