#ifndef CTIMERSHIMS_H
#define CTIMERSHIMS_H

// Glibc's Swift module does not expose these headers; including them here makes their
// functions and constants callable from Swift directly (timerfd_create, timerfd_settime,
// eventfd, epoll_create1, ...).
#include <sys/types.h>
#include <sys/timerfd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <stdint.h>
#include <time.h>
#include <pthread.h>

// The functions below exist only where Swift cannot call the C API itself. Each returns
// 0 (or a count) on success and a negative errno on failure; it never leaves the answer
// in `errno` for Swift to fetch.

/// epoll_ctl(EPOLL_CTL_ADD) for `fd` with `events`, carrying `token` back from epoll_wait.
/// (struct epoll_event is packed and holds a union, which Swift does not import usably.)
int ctk_epoll_add(int epfd, int fd, uint32_t events, uint64_t token);

/// epoll_wait into a plain array of tokens. Returns the number of ready tokens, or -errno.
int ctk_epoll_wait(int epfd, uint64_t *tokens, int max_tokens, int timeout_ms);

/// epoll_pwait2 (Linux 5.11+) into a plain array of tokens: `timeout` is relative, to the
/// nanosecond, NULL waits indefinitely. Returns the number of ready tokens, or -errno (-ENOSYS
/// on an older kernel).
int ctk_epoll_pwait2(int epfd, uint64_t *tokens, int max_tokens, const struct timespec *timeout);

/// prctl(PR_SET_TIMERSLACK, ns) for the calling thread (prctl is variadic).
int ctk_set_timer_slack(unsigned long nanoseconds);

/// prctl(PR_GET_TIMERSLACK): the calling thread's timer slack in nanoseconds, or -errno.
long ctk_timer_slack(void);

/// The kernel thread id of the calling thread (for /proc/self/task/TID and setpriority).
int ctk_gettid(void);

/// Names the calling thread (pthread_setname_np is a GNU extension Glibc's module omits).
int ctk_set_thread_name(const char *name);

/// A futex lock word: 0 free, 1 held, 2 held and perhaps waited for. Zero-initialised.
/// (The futex call is variadic `syscall`, which Swift cannot call.) The atomics are compiled
/// here, so that ThreadSanitizer instruments them and sees the lock's ordering.
typedef struct { uint32_t word; } ctk_lock_t;

/// Takes `lock`, waiting in the kernel while another thread holds it.
void ctk_lock(ctk_lock_t *lock);

/// Takes `lock` if it is free: 1 if taken, 0 if another thread holds it.
int ctk_trylock(ctk_lock_t *lock);

/// Lets `lock` go, waking one waiter if there may be one.
void ctk_unlock(ctk_lock_t *lock);

/// A condition's sequence word and count of waiting threads, paired with a `ctk_lock_t`.
/// Zero-initialised.
typedef struct { uint32_t sequence; uint32_t waiters; } ctk_condition_t;

/// Lets `lock` (held) go, waits until `condition` is broadcast (or spuriously), and takes
/// `lock` again. Callers wait in a loop on their own condition, as with pthread_cond_wait.
void ctk_condition_wait(ctk_condition_t *condition, ctk_lock_t *lock);

/// Wakes every thread waiting on `condition`; with none waiting, makes no system call.
void ctk_condition_broadcast(ctk_condition_t *condition);

#endif
