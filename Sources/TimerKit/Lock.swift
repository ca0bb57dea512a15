import Glibc

/// A mutex over a heap-allocated `pthread_mutex_t`.
///
/// Not `Synchronization.Mutex`: ThreadSanitizer cannot see its futex and reports false
/// races inside `withLock`, which would make `swift test --sanitize=thread` useless.
/// The pthread mutex lives at a stable heap address, so it is never moved while locked.
package final class PThreadMutex: @unchecked Sendable {
    // @unchecked: the only state is the pthread mutex, which is itself the synchronisation.
    package let raw: UnsafeMutablePointer<pthread_mutex_t>

    package init() {
        raw = .allocate(capacity: 1)
        raw.initialize(to: pthread_mutex_t())
        pthread_mutex_init(raw, nil)
    }

    deinit {
        pthread_mutex_destroy(raw)
        raw.deinitialize(count: 1)
        raw.deallocate()
    }

    @inline(__always) package func lock() { pthread_mutex_lock(raw) }
    @inline(__always) package func unlock() { pthread_mutex_unlock(raw) }

    @inline(__always)
    package func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        pthread_mutex_lock(raw)
        defer { pthread_mutex_unlock(raw) }
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
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(raw, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(raw)
        raw.deinitialize(count: 1)
        raw.deallocate()
    }

    /// Waits until signalled; the caller holds `mutex`.
    package func wait(_ mutex: PThreadMutex) { pthread_cond_wait(raw, mutex.raw) }

    /// Waits until signalled or until the monotonic deadline; returns false on time-out.
    package func wait(_ mutex: PThreadMutex, until deadline: MonotonicInstant) -> Bool {
        var ts = timespecOf(nanoseconds: deadline.nanoseconds)
        return pthread_cond_timedwait(raw, mutex.raw, &ts) == 0
    }

    package func broadcast() { pthread_cond_broadcast(raw) }
}

/// A value guarded by a `PThreadMutex`; handy for state shared with timer handlers.
public final class Locked<Value>: @unchecked Sendable {
    // @unchecked: every access to `value` goes through `mutex`.
    private let mutex = PThreadMutex()
    private var value: Value

    /// Wraps `value`.
    public init(_ value: Value) { self.value = value }

    /// Runs `body` with exclusive access to the value.
    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        try mutex.withLock { try body(&value) }
    }

    /// A copy of the current value.
    public var current: Value { mutex.withLock { value } }
}
