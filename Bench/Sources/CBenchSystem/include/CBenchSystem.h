#ifndef CBENCHSYSTEM_H
#define CBENCHSYSTEM_H

// What the bench needs of Linux that Glibc's Swift module leaves out: timerfd (the floor
// baselines), mallinfo2 and malloc_trim (memory per timer), and the kernel thread id
// (per-thread wake-up counts from /proc).
#include <sys/types.h>
#include <sys/timerfd.h>
#include <malloc.h>

/// The kernel thread id of the calling thread (gettid is a GNU extension Glibc's module omits).
int bench_gettid(void);

#endif
