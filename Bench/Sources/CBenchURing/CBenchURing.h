#ifndef CBENCHURING_H
#define CBENCHURING_H

// liburing's API for the bench's raw io_uring subject (uring-raw), the same design as
// TimerKit's io_uring loop with no TimerKit code. TimerKit keeps its own binding internal.
// <sys/types.h> and <sys/select.h> first: without them a debug build fails with an
// fd_set/fds_bits clash between this module and the others that include <sys/select.h>.
#include <sys/types.h>
#include <sys/select.h>
#include <liburing.h>

#endif
