import CTimerShims
import Glibc
import TimerKit

/// A joinable pthread running one closure: Foundation's `Thread` cannot be joined, and a
/// backend's shutdown must wait for its loop to be gone before it returns.
final class LoopThread: @unchecked Sendable {
    // @unchecked: `handle` is written once in init, before the thread is shared.
    private final class Start {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    private var handle = pthread_t()

    init(_ body: @escaping @Sendable () -> Void) throws(TimerError) {
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
    var isCurrent: Bool { pthread_equal(handle, pthread_self()) != 0 }

    func join() { pthread_join(handle, nil) }
    func detach() { pthread_detach(handle) }
}

/// Names the calling thread (truncated to the kernel's 15 characters).
func nameCurrentThread(_ name: String) {
    _ = ctk_set_thread_name(String(name.prefix(15)))
}
