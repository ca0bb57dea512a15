#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include "CTestEnvironment.h"

// The test process runs Swift's global executor on Dispatch's ordinary global queues instead of
// its cooperative pool (one thread per core: two here). The suite's blocking tests (a few
// hundred, waiting on real time) each hold a pool thread while they run, so a task that a test
// starts on the global executor (a `Task {}`, Dispatch's `scheduleAsync` runs, jobs stranded by a
// shutdown) could wait behind all of them: with two spinning processes beside the suite
// (`test-under-load`), 4 runs in 10 ended on a watchdog that way, and none with this set. The
// runtime reads the variable on first use, after this constructor has run; a value already in
// the environment is kept.
//
// Not under ThreadSanitizer: there the watchdogs wait ten times as long, and Dispatch's ordinary
// queues, which add a thread whenever one blocks, took a CI run past what TSan's thread tracing
// held (a SEGV inside TSan's runtime at thread 19,964).
__attribute__((constructor)) static void ctk_use_ordinary_global_queues(void) {
    if (dlsym(RTLD_DEFAULT, "__tsan_init") != NULL) return;
    setenv("SWIFT_DEBUG_CONCURRENCY_ENABLE_COOPERATIVE_QUEUES", "0", 0);
}

int ctk_tests_use_ordinary_global_queues(void) {
    const char *value = getenv("SWIFT_DEBUG_CONCURRENCY_ENABLE_COOPERATIVE_QUEUES");
    return value != NULL && strcmp(value, "0") == 0;
}
