import Glibc
import Synchronization

/// A joinable pthread running one closure: Foundation's `Thread` cannot be joined, and a
/// backend's shutdown must wait for its loop to be gone before it returns.
package final class LoopThread: @unchecked Sendable {
    // @unchecked: `handle` is written once in init, before the thread is shared.
    private final class Start {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    private var handle = pthread_t()

    package init(_ body: @escaping @Sendable () -> Void) throws(TimerError) {
        let start = Unmanaged.passRetained(Start(body))
        let rc = pthread_create(&handle, nil, { argument in
            guard let argument else { return nil }
            Unmanaged<Start>.fromOpaque(argument).takeRetainedValue().body()
            return nil
        }, start.toOpaque())
        if rc != 0 {
            start.release()
            throw .systemCall(call: "pthread_create", errno: rc)
        }
    }

    /// Whether the caller is this thread.
    package var isCurrent: Bool { pthread_equal(handle, pthread_self()) != 0 }

    package func join() { pthread_join(handle, nil) }
    package func detach() { pthread_detach(handle) }
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
