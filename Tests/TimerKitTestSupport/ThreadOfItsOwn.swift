import Testing
import TimerKitConformance

/// Runs each test of a suite on a thread of its own, as the conformance checks and the async
/// `withWatchdog` run theirs. A blocking test run as Swift Testing runs a synchronous test holds
/// one of the global executor's threads (two on this machine) for as long as it blocks, and
/// every task that needs that executor meanwhile waits: with this suite's blocking tests in the
/// run, a conformance check's `Task.sleep` of 20 ms did not resume for its 90 s watchdog (5 of 7
/// `test-under-load` runs).
package struct ThreadOfItsOwn: SuiteTrait, TestTrait, TestScoping {
    package var isRecursive: Bool { true }

    package func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // Once per test case: the suite itself, and a parameterized test as a whole, only pass on.
        guard testCase != nil else { return try await function() }
        let executor = ThreadTaskExecutor()
        defer { executor.stop() }
        try await withTaskExecutorPreference(executor) { try await function() }
    }
}

extension Trait where Self == ThreadOfItsOwn {
    /// Each test case on a thread of its own (`ThreadOfItsOwn`).
    package static var onAThreadOfItsOwn: Self { Self() }
}
