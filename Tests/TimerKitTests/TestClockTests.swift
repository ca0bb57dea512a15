import Dispatch
import Glibc
import Testing
import TimerKitTestSupport

@_spi(BackendImplementation) @testable import TimerKit

// Code under test: it takes any `Clock<Duration>`, as a library would.

/// Searches for what the user typed once they have paused typing for `quietPeriod`.
///
/// `run()` is the field's life, in a task its owner starts; each keystroke's wait is a child
/// task of it (structured, so it runs wherever `run()` runs, and a test can wait for it).
actor SearchField<C: Clock<Duration>> {
    let clock: C
    let quietPeriod: Duration
    private(set) var queries: [String] = []
    private var latest = 0
    private let keystrokes: AsyncStream<String>
    private let typed: AsyncStream<String>.Continuation

    init(clock: C, quietPeriod: Duration = .milliseconds(300)) {
        self.clock = clock
        self.quietPeriod = quietPeriod
        (keystrokes, typed) = AsyncStream.makeStream()
    }

    /// The user typed: the whole text so far.
    nonisolated func type(_ text: String) { typed.yield(text) }

    /// The user left the field.
    nonisolated func close() { typed.finish() }

    func run() async {
        await withDiscardingTaskGroup { group in
            for await text in keystrokes {
                latest += 1
                let keystroke = latest
                group.addTask {
                    try? await self.clock.sleep(for: self.quietPeriod)
                    await self.search(text, ifStillLatest: keystroke)
                }
            }
        }
    }

    private func search(_ text: String, ifStillLatest keystroke: Int) {
        if keystroke == latest { queries.append(text) }
    }
}

/// Calls `operation` until it succeeds, waiting 1 s, 2 s, 4 s… between attempts, at most
/// `attempts` times.
func withRetries<C: Clock<Duration>>(
    attempts: Int, clock: C, _ operation: () async throws -> Void
) async throws {
    var delay = Duration.seconds(1)
    for attempt in 1...attempts {
        do {
            return try await operation()
        } catch  where attempt < attempts {
            try await clock.sleep(for: delay)
            delay *= 2
        }
    }
}

struct Unavailable: Error {}

@Suite("ManualBackend as a test clock")
struct TestClockTests {
    @Test func aDebouncedSearchFieldSearchesOnceTheTypingStops() async {
        await withWatchdog {
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            let field = SearchField(clock: clock.clock)
            let running = Task(executorPreference: clock.taskExecutor) { await field.run() }
            field.type("s")
            await clock.advanceAndSettle(by: .milliseconds(200))
            field.type("sw")
            await clock.advanceAndSettle(by: .milliseconds(200))
            field.type("swift")
            await clock.advanceAndSettle(by: .milliseconds(299))
            #expect(await field.queries == [], "still typing, as far as the field can tell")
            await clock.advanceAndSettle(by: .milliseconds(1))
            #expect(await field.queries == ["swift"])
            field.close()
            await clock.advanceAndSettle(by: .seconds(1))
            await running.value
            #expect(await field.queries == ["swift"])
        }
    }

    @Test func aRetryLoopBacksOffOnVirtualTime() async throws {
        try await withWatchdog {
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            let attempts = Locked<[MonotonicInstant]>([])
            let start = clock.now()
            let retrying = Task(executorPreference: clock.taskExecutor) {
                try await withRetries(attempts: 4, clock: clock.clock) {
                    attempts.withLock { $0.append(clock.now()) }
                    if attempts.current.count < 4 { throw Unavailable() }
                }
            }
            await clock.settle()
            #expect(attempts.current == [start], "the first attempt runs at once")
            await clock.advanceAndSettle(by: .milliseconds(999))
            #expect(attempts.current.count == 1)
            await clock.advanceAndSettle(by: .milliseconds(1))
            #expect(attempts.current.count == 2)
            await clock.advanceAndSettle(by: .seconds(6))
            #expect(attempts.current.map { $0 - start } == [.zero, .seconds(1), .seconds(3), .seconds(7)])
            try await retrying.value
        }
    }

    @Test func advanceFiresDeadlinesThatResumedTasksSetInsideTheWindow() async {
        await withWatchdog {
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            let wakes = Locked<[Duration]>([])
            let start = clock.now()
            let task = Task(executorPreference: clock.taskExecutor) {
                for _ in 0..<5 {
                    try? await clock.clock.sleep(for: .milliseconds(100))
                    wakes.withLock { $0.append(clock.now() - start) }
                }
            }
            await clock.advanceAndSettle(by: .milliseconds(350))
            #expect(wakes.current == [.milliseconds(100), .milliseconds(200), .milliseconds(300)])
            await clock.advanceAndSettle(by: .seconds(1))
            await task.value
            #expect(wakes.current.count == 5)
        }
    }

    @Test func settleWaitsForTasksSuspendedOnAnythingAndReturnsAtOnceWhenIdle() async {
        await withWatchdog {
            let clock = ManualBackend(registry: TimerRegistry())
            defer { clock.shutdown() }
            await clock.settle()  // nothing has run on the executor: idle at once
            let progress = Locked(0)
            let parked = Locked<UnsafeContinuation<Void, Never>?>(nil)
            let gate = DispatchSemaphore(value: 0)
            let task = Task(executorPreference: clock.taskExecutor) {
                progress.withLock { $0 = 1 }
                gate.wait()  // busy on the executor's thread: settle waits it out
                progress.withLock { $0 = 2 }
                // Suspended on something other than the clock, until the test lets it go.
                await withUnsafeContinuation { continuation in parked.withLock { $0 = continuation } }
                progress.withLock { $0 = 3 }
            }
            // The job is running, and is let go only once settle is waiting: so settle provably
            // waits out a running job (a settle that returned early is never counted as waiting).
            _ = waitFor(.seconds(10)) { progress.current == 1 }
            onBackgroundThread {
                _ = waitFor(.seconds(10)) { clock.taskExecutor.settleWaiterCount == 1 }
                gate.signal()
            }
            await clock.settle()
            #expect(progress.current == 2, "settled: the task is suspended, waiting for something other than the clock")
            parked.withLock { $0.take() }?.resume()
            await task.value
            #expect(progress.current == 3)
        }
    }

    @Test func tasksKeepRunningAfterTheBackendShutsDown() async {
        await withWatchdog {
            let clock = ManualBackend(registry: TimerRegistry())
            let task = Task(executorPreference: clock.taskExecutor) {
                try? await clock.clock.sleep(for: .seconds(10))
                return "woken"
            }
            await clock.settle()
            clock.shutdown()  // the sleep's timer is cancelled: the task goes on, elsewhere
            #expect(await task.value == "woken")
        }
    }
}

@Suite("MonotonicInstant and the standard clocks")
struct InstantConversionTests {
    private func read(_ clock: clockid_t) -> UInt64 {
        var ts = timespec()
        clock_gettime(clock, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    @Test func suspendingClockInstantsAreTheSameInstantsExactly() {
        let before = read(CLOCK_MONOTONIC)
        let instant = MonotonicInstant(SuspendingClock.now)
        let after = read(CLOCK_MONOTONIC)
        #expect((before...after).contains(instant.nanoseconds))
        let there = MonotonicInstant(nanoseconds: 123_456_789_012)
        #expect(MonotonicInstant(there.suspendingClockInstant) == there)
    }

    @Test func continuousClockInstantsConvertThroughTheSuspendedTime() {
        let before = MonotonicInstant.now()
        let instant = MonotonicInstant(ContinuousClock.now)
        let after = MonotonicInstant.now()
        // Exact but for the reads themselves, while the machine is not suspended.
        #expect(instant >= before.advanced(by: .microseconds(-50)) && instant <= after.advanced(by: .microseconds(50)))
        let there = MonotonicInstant(nanoseconds: 987_654_321_000)
        let roundTrip = MonotonicInstant(there.continuousClockInstant)
        #expect(abs((roundTrip - there).saturatingNanoseconds) < 1_000)
    }

    @Test func dispatchTimesAreTheSameInstantsExactly() {
        let time = DispatchTime.now()
        #expect(MonotonicInstant(time).dispatchTime == time)
        #expect(MonotonicInstant.distantFuture.dispatchTime == .distantFuture)
    }

    @Test func instantArithmeticSaturatesAtBothEnds() {
        let instant = MonotonicInstant(nanoseconds: 5)
        #expect(instant.advanced(by: .nanoseconds(-10)) == MonotonicInstant(nanoseconds: 0))
        #expect(MonotonicInstant.distantFuture.advanced(by: .seconds(1)) == .distantFuture)
        #expect(instant.duration(to: MonotonicInstant(nanoseconds: 2)) == .nanoseconds(-3))
    }
}
