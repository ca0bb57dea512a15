#define _GNU_SOURCE
#include "CBenchSystem.h"

#include <unistd.h>

int bench_gettid(void) { return (int)gettid(); }
