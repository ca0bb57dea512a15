import CTimerShims
import Glibc
import Synchronization

/// A mutex on a futex word (`ctk_lock`): taking and letting go of a free lock is one atomic
/// instruction each and no system call; a thread that finds it held sleeps in the kernel.
///
/// Not `Synchronization.Mutex`: ThreadSanitizer reports false races inside its `withLock` (it
/// does not see that lock's ordering). These atomics are compiled in TimerKit's C shim, which
/// the sanitizer instruments, so it sees this lock's ordering (`make tsan` runs clean). Not a
/// pthread mutex: taking and letting go of one costs about 75 instructions, this about 20, and
/// every schedule and cancel takes a lock.
///
/// The word lives at a stable heap address, so it is never moved while locked. Debug builds
/// record the holder: a thread that takes it again crashes with a message naming the lock
/// instead of hanging, which turns a broken "no user code under a lock" rule into a failing
/// test rather than a stuck CI run.
package final class FutexLock: @unchecked Sendable {
    // @unchecked: the lock word is changed only by the C shim's atomic operations; `holder`
    // is an atomic.
    fileprivate let raw: UnsafeMutablePointer<ctk_lock_t>
    #if DEBUG
        /// The thread holding it (`pthread_self()`), 0 when free.
        private let holder = Atomic<UInt>(0)
    #endif

    package init() {
        raw = .allocate(capacity: 1)
        raw.initialize(to: ctk_lock_t(word: 0))
    }

    deinit {
        raw.deinitialize(count: 1)
        raw.deallocate()
    }

    @inline(__always) package func lock() {
        #if DEBUG
            precondition(
                holder.load(ordering: .relaxed) != UInt(pthread_self()),
                "TimerKit: a lock was taken again by the thread that holds it (user code ran under a TimerKit lock?)")
        #endif
        ctk_lock(raw)
        #if DEBUG
            holder.store(UInt(pthread_self()), ordering: .relaxed)
        #endif
    }

    @inline(__always) package func unlock() {
        #if DEBUG
            precondition(
                holder.load(ordering: .relaxed) == UInt(pthread_self()),
                "TimerKit: a lock was let go of by a thread that does not hold it")
            holder.store(0, ordering: .relaxed)
        #endif
        ctk_unlock(raw)
    }

    @inline(__always)
    package func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        lock()
        defer { unlock() }
        return try body()
    }

    /// `condition.wait(self)`: lets go, waits, takes it again.
    fileprivate func wait(on condition: UnsafeMutablePointer<ctk_condition_t>) {
        #if DEBUG
            precondition(holder.load(ordering: .relaxed) == UInt(pthread_self()), "TimerKit: a condition waited on without its lock")
            holder.store(0, ordering: .relaxed)
        #endif
        ctk_condition_wait(condition, raw)
        #if DEBUG
            holder.store(UInt(pthread_self()), ordering: .relaxed)
        #endif
    }
}

/// A condition variable paired with a `FutexLock` (`ctk_condition_wait`). Waits may end
/// spuriously: callers wait in a loop on their own condition.
package final class FutexCondition: @unchecked Sendable {
    // @unchecked: the sequence and waiter words are changed only by the C shim's atomic
    // operations.
    private let raw: UnsafeMutablePointer<ctk_condition_t>

    package init() {
        raw = .allocate(capacity: 1)
        raw.initialize(to: ctk_condition_t(sequence: 0, waiters: 0))
    }

    deinit {
        raw.deinitialize(count: 1)
        raw.deallocate()
    }

    /// Waits until broadcast (or spuriously); the caller holds `lock`, and holds it again on
    /// return.
    package func wait(_ lock: FutexLock) { lock.wait(on: raw) }

    package func broadcast() { ctk_condition_broadcast(raw) }
}

/// A value guarded by a `FutexLock`, for TimerKit's own modules and tests, which run under
/// ThreadSanitizer (users have `Synchronization.Mutex`).
package final class Locked<Value>: @unchecked Sendable {
    // @unchecked: every access to `value` goes through `mutex`.
    private let mutex = FutexLock()
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
