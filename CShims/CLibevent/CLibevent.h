#ifndef CLIBEVENT_H
#define CLIBEVENT_H

// A libc header first: without it a debug build fails with an fd_set/fds_bits clash
// between this module and Glibc's.
#include <sys/types.h>
#include <event2/event.h>
#include <event2/thread.h>

#endif
