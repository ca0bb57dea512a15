// What one read at random costs on this machine, by the size of the memory read from: a chase
// through a random cycle of 64-byte lines, each read waiting for the one before (as a cancel
// waits for its timer's record). Sets the floor under a store operation among a million timers:
// their records are 64 MB, and no design that reads one record per operation goes below one such
// read.
//
//     cc -O2 scripts/memory-latency.c -o /tmp/memory-latency && /tmp/memory-latency
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double nanoseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1e9 + now.tv_nsec;
}

int main(void) {
    const size_t sizes[] = {32 << 10, 512 << 10, 2 << 20, 8 << 20, 24 << 20, 64 << 20, 256 << 20};
    const size_t reads = 2000000;
    srand(7);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t lines = sizes[s] / 64;
        uint64_t *memory = aligned_alloc(64, lines * 64);
        size_t *order = malloc(lines * sizeof *order);
        if (!memory || !order) return 1;
        for (size_t i = 0; i < lines; i++) order[i] = i;
        for (size_t i = lines - 1; i > 0; i--) {
            size_t j = (size_t)rand() % (i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        // Each line holds the index of the next line in the cycle.
        for (size_t i = 0; i < lines; i++) memory[order[i] * 8] = order[(i + 1) % lines] * 8;
        size_t at = 0;
        double start = nanoseconds();
        for (size_t i = 0; i < reads; i++) at = memory[at];
        double elapsed = nanoseconds() - start;
        printf("%7zu KB: %6.1f ns a read (%zu)\n", sizes[s] >> 10, elapsed / reads, at);
        free(memory);
        free(order);
    }
    return 0;
}
