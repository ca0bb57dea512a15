#if NIO
    import Dispatch
    import Foundation
    import NIOConcurrencyHelpers
    import TimerKit

    // The few helpers this package's own tests use. (The contract checks, with their own helpers,
    // come from TimerKitConformance.)

    /// A value shared with handlers on other threads.
    final class Locked<Value: Sendable>: Sendable {
        private let box: NIOLockedValueBox<Value>
        init(_ value: Value) { box = NIOLockedValueBox(value) }
        func withLock<R>(_ body: (inout Value) -> R) -> R { box.withLockedValue(body) }
        var current: Value { box.withLockedValue { $0 } }
    }

    /// A count shared with handlers on other threads.
    final class Counter: Sendable {
        private let value = Locked(0)
        func increment() { value.withLock { $0 += 1 } }
        var current: Int { value.current }
    }

    /// Runs `body` on a thread of its own (not a Dispatch worker, which busy tests may all hold).
    func onBackgroundThread(_ body: @escaping @Sendable () -> Void) { Thread.detachNewThread(body) }

    /// Polls `condition` every 2 ms until it holds or `timeout` passes.
    func waitFor(_ timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
        let deadline = MonotonicInstant.now() + timeout
        while !condition() {
            if MonotonicInstant.now() > deadline { return false }
            usleep(2000)
        }
        return true
    }

    /// `waitFor` without blocking a thread of the cooperative pool.
    func waitForAsync(_ timeout: Duration = .seconds(10), _ condition: @Sendable () -> Bool) async -> Bool {
        let deadline = MonotonicInstant.now() + timeout
        while !condition() {
            if MonotonicInstant.now() > deadline { return false }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return true
    }
#endif
