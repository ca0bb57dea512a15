#ifndef CTIMERSHIMS_H
#define CTIMERSHIMS_H

// Glibc's Swift module does not expose these headers; including them here makes their
// functions callable from Swift directly. Functions below exist only where Swift cannot
// call the C API itself. Each returns 0 or a negative errno (never sets errno for Swift).
#include <sys/types.h>
#include <sys/timerfd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <malloc.h>
#include <stdint.h>
#include <pthread.h>

#endif
