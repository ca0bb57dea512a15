import Dispatch
import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit

/// Lets the same test body run on virtual and real time.
package final class Harness: Sendable {
    /// The backend's name, for messages.
    package let name: String
    package let backend: any TimerBackend
    package let manual: ManualBackend?
    private let watchdog: Watchdog
    private let callerContext: @Sendable (@escaping @Sendable () -> Void) -> Void
    private let teardown: @Sendable () -> Void
    private let ownExecutor = ThreadTaskExecutor()

    init(
        name: String, backend: any TimerBackend, manual: ManualBackend? = nil, watchdog: Watchdog,
        onCallerContext: (@Sendable (@escaping @Sendable () -> Void) -> Void)? = nil,
        teardown: @escaping @Sendable () -> Void = {}
    ) {
        self.name = name
        self.backend = backend
        self.manual = manual
        self.watchdog = watchdog
        self.callerContext = onCallerContext ?? { onBackgroundThread($0) }
        self.teardown = teardown
    }

    package var registry: TimerRegistry { backend.registry }

    /// Where a test runs the tasks of the code under test: Manual's test executor (so that
    /// `advance` and `settle` see them), or a thread of the harness's own on real backends.
    package var taskExecutor: any TaskExecutor { manual?.taskExecutor ?? ownExecutor }

    /// Lets `duration` of backend time pass: virtual time advances, real time is waited out.
    package func pass(_ duration: Duration) {
        if let manual { manual.advance(by: duration) } else { blockRealTime(duration) }
    }

    /// Called from inside a handler: the loop is held for `duration` and runs nothing meanwhile,
    /// so that what comes due then is overdue together when the handler returns (virtual time
    /// moves without firing anything; real time is waited out).
    package func stall(_ duration: Duration) {
        if let manual { manual.stall(for: duration) } else { blockRealTime(duration) }
    }

    /// Called from inside a handler: the handler "takes" `duration`.
    package func work(_ duration: Duration) {
        if let manual { manual.advance(by: duration) } else { blockRealTime(duration) }
    }

    /// Waits until `condition` holds, advancing virtual time in 1 ms steps or polling real
    /// time, for at most `timeout` (generous: this VM is noisy).
    @discardableResult
    package func waitUntil(_ timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
        guard manual != nil else { return waitFor(timeout, condition) }
        var waited = Duration.zero
        while !condition() {
            // Virtual time runs out in real milliseconds, but a condition may wait on a real
            // thread too (a cancel from a background thread, a release there): on a busy
            // machine that thread may not have run yet. Give it real time as well.
            if waited >= timeout { return waitFor(timeout, condition) }
            pass(.milliseconds(1))
            waited += .milliseconds(1)
        }
        return true
    }

    /// `waitUntil` for async tests: on real time it polls without holding a thread of the
    /// cooperative pool (which has one per core: tests that block it starve every async test).
    package func waitUntilAsync(_ timeout: Duration = .seconds(10), _ condition: @Sendable () -> Bool) async -> Bool {
        guard manual != nil else { return await waitForAsync(timeout, condition) }
        return waitUntil(timeout, condition)  // virtual time: each step is quick
    }

    /// `pass` for async tests: real time is slept, not blocked.
    package func passAsync(_ duration: Duration) async {
        if let manual { manual.advance(by: duration) } else { try? await Task.sleep(for: duration) }
    }

    /// Runs `body` off the test's thread; on Manual it also drives virtual time there, so a
    /// handler can block while the test thread acts on its timer.
    package func driveInBackground(for duration: Duration, _ body: @escaping @Sendable () -> Void = {}) {
        onBackgroundThread { [manual] in
            body()
            manual?.advance(by: duration)
        }
    }

    /// Runs `operation` as code under test and returns its result. On real backends it simply
    /// runs; on Manual it runs as a task on the backend's task executor while virtual time
    /// advances 1 ms at a time (each step settling the task), up to `timeout` of virtual time.
    package func drive<T: Sendable>(
        _ timeout: Duration = .seconds(10), _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        guard let manual else { return try await operation() }
        let done = Locked(false)
        let task = Task(executorPreference: manual.taskExecutor) {
            defer { done.withLock { $0 = true } }
            return try await operation()
        }
        await manual.settle()
        var waited = Duration.zero
        while !done.current && waited < timeout {
            await manual.advanceAndSettle(by: .milliseconds(1))
            waited += .milliseconds(1)
        }
        if !done.current { task.cancel() }
        return try await task.value
    }

    /// Runs `body` where the code that owns the backend runs: a block on the caller's queue
    /// (Dispatch on a caller's queue), a callback of the caller's loop (attached libevent and
    /// RunLoop), or a thread of its own (backends with a loop of their own, and Manual).
    package func onCallerContext(_ body: @escaping @Sendable () -> Void) { callerContext(body) }

    /// Shuts the backend down, then the caller's loop, then disarms the watchdog.
    package func shutdown() {
        backend.shutdown()
        teardown()
        ownExecutor.stop()
        watchdog.disarm()
    }
}
