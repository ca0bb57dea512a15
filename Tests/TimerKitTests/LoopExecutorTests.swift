import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitTestSupport

/// The loop as a task executor, on a backend whose loop the test turns by hand (the pumped
/// example backend with no loop attached): what runs when, and what wakes the loop.
@Suite("Tasks on the loop")
struct LoopExecutorTests {
    /// A pumped backend with nothing pumping it, and a way to wait for its wake-up requests.
    private func makeBackend() -> PumpedBackend { PumpedBackend(registry: TimerRegistry()) }

    private func waitForWakeUpRequest(_ backend: PumpedBackend) -> Bool {
        waitFor(.seconds(10)) { backend.nextDeadline <= MonotonicInstant.now() }
    }

    @Test func aJobAsksTheIdleLoopToWakeAtOnceAndRunsWhenItTurns() async {
        await withWatchdog {
            let backend = makeBackend()
            defer { backend.shutdown() }
            #expect(backend.nextDeadline == .distantFuture)
            let ran = Locked(false)
            let task = Task(executorPreference: backend.taskExecutor) { ran.withLock { $0 = true } }
            #expect(waitForWakeUpRequest(backend))
            #expect(!ran.current, "a job runs on the loop, not on the thread that queued it")
            backend.runDueTimers()
            #expect(ran.current)
            await task.value
        }
    }

    @Test func cancellingTheLastTimerKeepsTheWakeUpThatAJobIsWaitingFor() async throws {
        try await withWatchdog {
            let backend = makeBackend()
            defer { backend.shutdown() }
            let timer = try backend.schedule(.after(.seconds(3600))) { _ in }
            let ran = Locked(false)
            let task = Task(executorPreference: backend.taskExecutor) { ran.withLock { $0 = true } }
            #expect(waitForWakeUpRequest(backend))
            timer.cancel()  // the heap is empty now, but the job still needs the loop
            #expect(backend.nextDeadline <= MonotonicInstant.now())
            backend.runDueTimers()
            #expect(ran.current)
            await task.value
        }
    }

    @Test func jobsRunInOrderAfterTheHandlersOfTheSameTurn() async throws {
        try await withWatchdog {
            let backend = makeBackend()
            defer { backend.shutdown() }
            let order = Locked<[String]>([])
            let deadline = MonotonicInstant.now() + .milliseconds(1)
            try backend.schedule(.at(deadline)) { _ in order.withLock { $0.append("handler") } }
            let first = Task(executorPreference: backend.taskExecutor) { order.withLock { $0.append("first job") } }
            #expect(waitForWakeUpRequest(backend))
            let second = Task(executorPreference: backend.taskExecutor) { order.withLock { $0.append("second job") } }
            _ = waitFor(.seconds(10)) { MonotonicInstant.now() >= deadline }
            backend.runDueTimers()
            #expect(order.current == ["handler", "first job", "second job"])
            await first.value
            await second.value
        }
    }

    @Test func aJobQueuedByAJobWaitsForTheNextTurnWithAWakeUpAsked() async throws {
        try await withWatchdog {
            let backend = makeBackend()
            defer { backend.shutdown() }
            // Armed an hour away, so that a request to come back at once is the jobs' doing.
            try backend.schedule(.after(.seconds(3600))) { _ in }
            let steps = Locked<[Int]>([])
            let task = Task(executorPreference: backend.taskExecutor) {
                steps.withLock { $0.append(1) }
                await Task.yield()
                steps.withLock { $0.append(2) }
            }
            #expect(waitForWakeUpRequest(backend))
            backend.runDueTimers()
            #expect(steps.current == [1], "a yielding task gives the loop back to its timers")
            // (The runtime takes two trips through the executor to resume after a yield.)
            var turns = 0
            while steps.current.count < 2 && turns < 5 {
                #expect(backend.nextDeadline <= MonotonicInstant.now(), "the loop is asked to come back at once")
                backend.runDueTimers()
                turns += 1
            }
            #expect(steps.current == [1, 2])
            await task.value
        }
    }

    /// The stranded job goes to the global executor, which the suite's blocking (synchronous)
    /// tests share: on a loaded 2-core machine it waited its turn there for 30–52 s while the
    /// rest of the suite ran (the job itself ran, on a thread at nice 0). The watchdog allows
    /// for that queue; a job that never runs still fails it.
    @Test func jobsWaitingWhenTheBackendShutsDownRunElsewhere() async {
        await withWatchdog(seconds: 180) {
            let backend = makeBackend()
            let task = Task(executorPreference: backend.taskExecutor) { backend.scheduler.isOnLoop }
            #expect(waitForWakeUpRequest(backend))
            backend.shutdown()  // the loop never turned
            #expect(await task.value == false)
        }
    }
}
