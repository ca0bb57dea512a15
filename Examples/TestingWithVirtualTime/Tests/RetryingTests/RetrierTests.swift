import Retrying
import Synchronization
import Testing
import TimerKit

struct Unavailable: Error {}

/// Each test runs the retrier on the manual clock's task executor and moves virtual time with
/// `advanceAndSettle(by:)`: it returns once every task has reacted, so no test sleeps or polls.
@Suite("Retrier on virtual time")
struct RetrierTests {
    @Test func backsOffOneSecondThenTwoThenSucceeds() async throws {
        let clock = ManualBackend(registry: TimerRegistry())  // a registry of the test's own
        defer { clock.shutdown() }
        let calls = Mutex(0)
        let retrier = Retrier(backend: clock, attempts: 5, firstDelay: .seconds(1), timeout: .seconds(30))
        let result = Task(executorPreference: clock.taskExecutor) {
            try await retrier.run {
                let call = calls.withLock { calls in
                    calls += 1
                    return calls
                }
                if call < 3 { throw Unavailable() }
                return "reply \(call)"
            }
        }
        await clock.settle()
        #expect(calls.withLock { $0 } == 1)
        await clock.advanceAndSettle(by: .milliseconds(999))
        #expect(calls.withLock { $0 } == 1, "the first back-off is a whole second")
        await clock.advanceAndSettle(by: .milliseconds(1))
        #expect(calls.withLock { $0 } == 2)
        await clock.advanceAndSettle(by: .milliseconds(1_999))
        #expect(calls.withLock { $0 } == 2, "the second back-off is twice the first")
        await clock.advanceAndSettle(by: .milliseconds(1))
        #expect(try await result.value == "reply 3")
    }

    @Test func anAttemptThatHangsIsCancelledAtItsTimeout() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let cancelled = Mutex(0)
        let retrier = Retrier(backend: clock, attempts: 2, firstDelay: .seconds(1), timeout: .seconds(5))
        let result = Task(executorPreference: clock.taskExecutor) {
            try await retrier.run { () async throws -> String in
                // Waits for a reply that never comes: only the timeout ends it.
                do {
                    try await clock.clock.sleep(for: .seconds(3_600))
                } catch {
                    cancelled.withLock { $0 += 1 }
                    throw error
                }
                return "never"
            }
        }
        await clock.advanceAndSettle(by: .milliseconds(4_999))
        #expect(cancelled.withLock { $0 } == 0)
        await clock.advanceAndSettle(by: .milliseconds(1))
        #expect(cancelled.withLock { $0 } == 1, "the first attempt is cancelled at 5 s")
        await clock.advanceAndSettle(by: .seconds(6))  // the back-off, then the second attempt's 5 s
        #expect(cancelled.withLock { $0 } == 2)
        await #expect {
            try await result.value
        } throws: { error in
            let gaveUp = error as? Retrier<ManualBackend>.GaveUp
            return gaveUp?.attempts == 2 && gaveUp?.lastError is TimeoutError
        }
    }

    @Test func givesUpAfterTheLastAttemptWithItsError() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let calls = Mutex(0)
        let retrier = Retrier(backend: clock, attempts: 3, firstDelay: .milliseconds(100), timeout: .seconds(1))
        let result = Task(executorPreference: clock.taskExecutor) {
            try await retrier.run { () async throws -> Int in
                calls.withLock { $0 += 1 }
                throw Unavailable()
            }
        }
        await clock.advanceAndSettle(by: .milliseconds(299))  // 100 ms, then 200 ms
        #expect(calls.withLock { $0 } == 2)
        await clock.advanceAndSettle(by: .milliseconds(1))
        #expect(calls.withLock { $0 } == 3)
        await #expect {
            try await result.value
        } throws: { error in
            (error as? Retrier<ManualBackend>.GaveUp)?.lastError is Unavailable
        }
        #expect(clock.registry.count == 0, "no timer is left behind")
    }
}
