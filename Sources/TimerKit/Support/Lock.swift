import Glibc

/// A mutex over a heap-allocated `pthread_mutex_t`.
///
/// Not `Synchronization.Mutex`: ThreadSanitizer cannot see its futex and reports false
/// races inside `withLock`, which would make `swift test --sanitize=thread` useless.
/// The pthread mutex lives at a stable heap address, so it is never moved while locked.
///
/// Debug builds make it error-checking: a thread that locks it twice crashes with a message
/// naming the lock instead of hanging, which turns a broken "no user code under a lock"
/// rule into a failing test rather than a stuck CI run.
package final class PThreadMutex: @unchecked Sendable {
    // @unchecked: the only state is the pthread mutex, which is itself the synchronisation.
    package let raw: UnsafeMutablePointer<pthread_mutex_t>

    package init() {
        raw = .allocate(capacity: 1)
        raw.initialize(to: pthread_mutex_t())
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        #if DEBUG
            pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ERRORCHECK))
        #endif
        let rc = pthread_mutex_init(raw, &attributes)
        pthread_mutexattr_destroy(&attributes)
        precondition(rc == 0, "TimerKit: pthread_mutex_init failed: errno \(rc)")
    }

    deinit {
        pthread_mutex_destroy(raw)
        raw.deinitialize(count: 1)
        raw.deallocate()
    }

    @inline(__always) package func lock() {
        let rc = pthread_mutex_lock(raw)
        precondition(
            rc == 0,
            rc == EDEADLK
                ? "TimerKit: a lock was taken again by the thread that holds it (user code ran under a TimerKit lock?)"
                : "TimerKit: pthread_mutex_lock failed: errno \(rc)")
    }

    @inline(__always) package func unlock() {
        let rc = pthread_mutex_unlock(raw)
        precondition(rc == 0, "TimerKit: pthread_mutex_unlock failed: errno \(rc) (unlocked by a thread that does not hold it?)")
    }

    @inline(__always)
    package func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// A condition variable paired with a `PThreadMutex`, on CLOCK_MONOTONIC.
package final class PThreadCondition: @unchecked Sendable {
    // @unchecked: the pthread condition is the synchronisation; callers hold the paired mutex.
    private let raw: UnsafeMutablePointer<pthread_cond_t>

    package init() {
        raw = .allocate(capacity: 1)
        raw.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(raw, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(raw)
        raw.deinitialize(count: 1)
        raw.deallocate()
    }

    /// Waits until signalled; the caller holds `mutex`.
    package func wait(_ mutex: PThreadMutex) {
        let rc = pthread_cond_wait(raw, mutex.raw)
        precondition(rc == 0, "TimerKit: pthread_cond_wait failed: errno \(rc)")
    }

    package func broadcast() { pthread_cond_broadcast(raw) }
}

/// A value guarded by a `PThreadMutex`, for TimerKit's own modules and tests, which run under
/// ThreadSanitizer (users have `Synchronization.Mutex`).
package final class Locked<Value>: @unchecked Sendable {
    // @unchecked: every access to `value` goes through `mutex`.
    private let mutex = PThreadMutex()
    private var value: Value

    /// Wraps `value`.
    package init(_ value: Value) { self.value = value }

    /// Runs `body` with exclusive access to the value.
    package func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        try mutex.withLock { try body(&value) }
    }

    /// A copy of the current value.
    package var current: Value { mutex.withLock { value } }
}
