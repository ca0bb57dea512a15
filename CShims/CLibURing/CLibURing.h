#ifndef CLIBURING_H
#define CLIBURING_H

// A libc header first: without it a debug build fails with an fd_set/fds_bits clash between
// this module and the others that include <sys/select.h>.
#include <sys/types.h>
#include <sys/select.h>

// liburing's API, found by pkg-config (Debian: liburing-dev). Its static inline helpers (the
// io_uring_prep_* functions, io_uring_get_sqe, io_uring_cqe_seen) are compiled into the Swift
// module that calls them: Swift calls them directly, and no C shim stands in between.
#include <liburing.h>

#endif
