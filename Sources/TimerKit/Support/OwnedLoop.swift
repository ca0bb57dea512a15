import Glibc
import Synchronization

/// The life of a loop that runs on a thread of its own (epoll, libevent, RunLoop, the
/// display tick): start it, stop it from any thread — including from inside the loop — and
/// free what the loop uses exactly once, when no code of the loop can touch it any more.
///
/// - `stop(wake:)` from another thread wakes the loop, joins the thread and then frees.
/// - `stop(wake:)` from the loop's own thread (a handler shutting its backend down) cannot
///   join itself: it detaches, and the thread frees when its loop body returns.
/// - A loop body that returns on its own (its loop died) frees nothing: descriptors stay
///   valid until `stop` runs, so a late wake-up never writes to a reused descriptor number.
package final class OwnedLoop: @unchecked Sendable {
    // @unchecked: `handle` is written once in `init`, before the object is shared, and read
    // only by `stop` on other threads; every other field is atomic or immutable.

    private final class Start {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    private var handle = pthread_t()
    private let loopThread = Atomic<UInt>(0)
    private let stopRequested = Atomic<Bool>(false)
    private let freesOnExit = Atomic<Bool>(false)
    private let release: @Sendable () -> Void

    /// Starts a thread running `body`, which should return soon after `isStopping` turns
    /// true. `release` frees what the loop uses (descriptors, native objects); it runs once.
    package init(_ body: @escaping @Sendable (OwnedLoop) -> Void, release: @escaping @Sendable () -> Void) throws(TimerError) {
        self.release = release
        // The thread holds the loop until its body has returned.
        let start = Unmanaged.passRetained(
            Start { [self] in
                loopThread.store(UInt(pthread_self()), ordering: .releasing)
                body(self)
                if freesOnExit.load(ordering: .acquiring) { self.release() }
            })
        let rc = pthread_create(
            &handle, nil,
            { argument in
                guard let argument else { return nil }
                Unmanaged<Start>.fromOpaque(argument).takeRetainedValue().body()
                return nil
            }, start.toOpaque())
        if rc != 0 {
            start.release()
            throw .systemCall(call: "pthread_create", errno: rc)
        }
    }

    /// Whether the caller is the loop's thread.
    package var isCurrent: Bool { loopThread.load(ordering: .acquiring) == UInt(pthread_self()) }

    /// Whether `stop` has been called: the loop body's exit condition.
    package var isStopping: Bool { stopRequested.load(ordering: .acquiring) }

    /// Stops the loop and frees it. Idempotent. `wake` makes the loop leave its wait (or,
    /// called from inside the loop, return once the current callback does); it runs once.
    package func stop(wake: () -> Void) {
        guard !stopRequested.exchange(true, ordering: .acquiringAndReleasing) else { return }
        if isCurrent {
            freesOnExit.store(true, ordering: .releasing)
            wake()
            pthread_detach(pthread_self())
        } else {
            wake()
            pthread_join(handle, nil)
            release()
        }
    }
}

/// Hands a value from a starting thread back to the thread that started it, once.
package final class StartSignal<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `value` is written once before `semaphore` is posted and read after.
    private let semaphore = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
    private var value: Value?

    package init() { sem_init(semaphore, 0, 0) }

    deinit {
        sem_destroy(semaphore)
        semaphore.deallocate()
    }

    package func send(_ value: Value) {
        self.value = value
        sem_post(semaphore)
    }

    package func receive() -> Value? {
        while sem_wait(semaphore) != 0 {}
        return value
    }
}

/// True for the first caller of `claim()` only: makes a `shutdown()` idempotent.
package final class OnceFlag: Sendable {
    private let claimed = Atomic<Bool>(false)
    package init() {}
    package func claim() -> Bool { !claimed.exchange(true, ordering: .acquiringAndReleasing) }
}
