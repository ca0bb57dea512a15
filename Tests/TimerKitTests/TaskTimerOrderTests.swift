import Dispatch
import Glibc
import Testing
import TimerKitTestSupport

@_spi(BackendImplementation) @testable import TimerKit

/// `scheduleAsync` timers end in one of two places: where their handler call is settled, or
/// where their task returns, whichever comes last. These tests force the orders a race takes.
@Suite("Task timers: the orders of a call and its task")
struct TaskTimerOrderTests {
    /// The task returns while the handler call that started it is still under way, and a wait
    /// for the end begins just then: once the call is over, the wait must end (it was lost).
    @Test func aWaitThatBeginsAfterTheTaskReturnedDuringItsCallStillEnds() throws {
        try withWatchdog {
            let manual = ManualBackend()
            defer { manual.shutdown() }
            let ended = DispatchSemaphore(value: 0)
            let timer = try manual.scheduleAsync(.after(.milliseconds(1))) { _ in }
            try timer.addObserver(
                TimerObserver(didFire: { tick, _ in
                    // Still inside the call; the task runs on the test executor's own thread.
                    #expect(waitFor(.seconds(10)) { tick.timer.currentState == .finished })
                    manual.scheduler.whenEnded(tick.timer.key) { ended.signal() }
                }))
            manual.advance(by: .milliseconds(1))
            #expect(ended.wait(timeout: .now() + 10) == .success)
        }
    }
}

/// Where a task timer's tasks start when the caller names no executor. (The conformance checks
/// give theirs a thread of their own, so this is the one test of the default on real time.)
@Suite("Task timers: the default executor")
struct TaskTimerDefaultExecutorTests {
    /// In a process of its own: the tasks start on the global executor, whose threads, in this
    /// run, are busy with the blocking tests queued before them (under load, the tasks did not
    /// start within 90 s).
    @Test func withNoPreferenceTheTasksHaveNoneAndRunToTheirEnd() async {
        await #expect(processExitsWith: .success) {
            let backend = DispatchBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let preferences = Locked<[Bool]>([])
            let timer = try backend.scheduleAsync(.every(.milliseconds(2), count: 2)) { _ in
                let hasPreference = withUnsafeCurrentTask { $0?.unownedTaskExecutor != nil }
                preferences.withLock { $0.append(hasPreference) }
            }
            let watchdog = Watchdog(seconds: 30)
            defer { watchdog.disarm() }
            guard try await timer.ended == .completed, preferences.current == [false, false] else { exit(1) }
        }
    }
}
