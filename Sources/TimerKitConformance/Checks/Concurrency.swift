import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit

extension Checks {
    /// The Swift Concurrency surface — the `Clock`, `ticks` and `scheduleAsync` — on every
    /// backend configuration.
    enum Concurrency {
        // MARK: The clock

        static func aSleepEndsNoEarlierThanItsDeadline(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let clock = h.backend.clock
            let (deadline, woke) = try await h.drive {
                let deadline = clock.now.advanced(by: ms(20))
                try await clock.sleep(until: deadline)
                return (deadline, clock.now)
            }
            expectOnTime("the sleep's end", due: deadline, happened: woke, on: kind)  // on virtual time, exactly at its deadline
            // The sleep's timer leaves the registry just after its handler woke the sleeper.
            #expect(await h.waitUntilAsync { h.registry.count == 0 })
        }

        static func aSleepIsInTheRegistryWhileItWaits(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let clock = h.backend.clock
            let sleeping = Task(executorPreference: h.taskExecutor) {
                try await clock.sleep(for: .seconds(3600), name: "nap")
            }
            await h.manual?.settle()
            #expect(await waitForAsync { h.registry.timer(named: "nap") != nil })
            #expect(try h.registry.snapshot(named: "nap").nextDeadline != nil)
            sleeping.cancel()
            await #expect(throws: CancellationError.self) { try await sleeping.value }
            #expect(h.registry.timer(named: "nap") == nil, "cancelling the task cancelled the timer")
        }

        static func cancellingTheTaskEndsTheSleepAtOnce(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let clock = h.backend.clock
            let sleeping = Task(executorPreference: h.taskExecutor) { try await clock.sleep(for: .seconds(3600)) }
            await h.manual?.settle()
            #expect(await waitForAsync { h.registry.count == 1 })
            sleeping.cancel()
            await #expect(throws: CancellationError.self) { try await sleeping.value }
            #expect(h.registry.count == 0)

            let alreadyCancelled = Task(executorPreference: h.taskExecutor) {
                withUnsafeCurrentTask { $0?.cancel() }
                try await clock.sleep(for: .seconds(1))
            }
            await #expect(throws: CancellationError.self) { try await alreadyCancelled.value }
        }

        static func sleepingOnAShutDownBackendThrowsItsError(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            h.backend.shutdown()
            defer { h.shutdown() }
            await #expect(throws: TimerError.backendShutDown(backend: h.backend.name)) {
                try await h.backend.clock.sleep(for: .seconds(1))
            }
        }

        // MARK: ticks

        static func aCountedTickSequenceDeliversEveryTickOnTheGridAndEnds(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let ticks = try h.backend.ticks(.every(ms(5), count: 4), name: "four")
            let clock = h.backend.clock
            let seen = try await h.drive {
                var seen: [(tick: Tick, asked: MonotonicInstant)] = []
                var iterator = ticks.makeAsyncIterator()
                while true {
                    let asked = clock.now
                    guard let tick = await iterator.next() else { break }
                    seen.append((tick, asked))
                }
                return seen
            }
            #expect(seen.map(\.tick.index) == [0, 1, 2, 3])
            for (previous, tick) in zip(seen.map(\.tick), seen.dropFirst().map(\.tick)) {
                #expect((tick.scheduled - previous.scheduled).components.attoseconds % 5_000_000_000_000_000 == 0)
                #expect(tick.scheduled > previous.scheduled)
            }
            // The timer waits while the loop body runs: a tick is late from when it was asked for.
            for (tick, asked) in seen { expectOnTime(tick, notBefore: asked, on: kind) }
            #expect(h.registry.count == 0)
        }

        static func aSlowConsumerIsALateHandler(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let ticks = try h.backend.ticks(.every(ms(10)), missedTicks: .skip)
            let clock = h.backend.clock
            let (seen, asked, slept) = try await h.drive {
                var seen: [Tick] = []
                var asked: [MonotonicInstant] = []
                var slept: (due: MonotonicInstant, woke: MonotonicInstant)?
                var iterator = ticks.makeAsyncIterator()
                while true {
                    asked.append(clock.now)
                    guard let tick = await iterator.next() else { break }
                    seen.append(tick)
                    if tick.index == 0 {  // a slow iteration
                        let due = clock.now + ms(35)
                        try await clock.sleep(until: due)
                        slept = (due, clock.now)
                    }
                    if seen.count == 3 { break }
                }
                return (seen, asked, slept)
            }
            for (tick, asked) in zip(seen, asked) { expectOnTime(tick, notBefore: asked, on: kind) }
            if let slept { expectOnTime("the slow iteration's sleep", due: slept.due, happened: slept.woke, on: kind) }
            // Not a queue of the ticks that came due meanwhile: the latest, with the rest counted.
            #expect(seen[1].missed >= 2)
            #expect(seen[1].scheduled - seen[0].scheduled >= ms(30))
            if !kind.isRealTime {
                #expect(seen.map(\.missed) == [0, 2, 0])
                #expect(seen[1].scheduled - seen[0].scheduled == ms(30))
            }
            #expect(await waitForAsync { h.registry.count == 0 }, "breaking out of the loop cancelled the timer")
        }

        static func aTickThatComesWhileTheConsumerIsBusyIsKeptOrCounted(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let ticks = try h.backend.ticks(.every(ms(10), count: 4), name: "busy")
            let timer = ticks.timer
            let clock = h.backend.clock
            let seen = try await h.drive {
                var seen: [Tick] = []
                for await tick in ticks {
                    seen.append(tick)
                    guard tick.index < 2 else { continue }
                    // Resumed from outside while the body runs: the tick comes with no one waiting.
                    let fires = timer.fireCount
                    h.registry.resumeAll()
                    // Fired, and its handler has suspended it again (the tick is kept): a resume
                    // that came between the fire and that suspend would change nothing, and the
                    // timer would wait, suspended, for a resume that never comes. On a busy
                    // machine the timer may have fired its last tick already.
                    func hasFiredSince(_ count: Int) -> Bool {
                        timer.currentState.hasEnded || (timer.fireCount != count && timer.currentState == .suspended)
                    }
                    while !hasFiredSince(fires) { try await clock.sleep(for: ms(1)) }
                    if tick.index == 1 {
                        // And once more: the tick kept for the body is passed over, and counted.
                        h.registry.resumeAll()
                        while !hasFiredSince(fires + 1) { try await clock.sleep(for: ms(1)) }
                    }
                }
                return seen
            }
            #expect(seen.first?.index == 0)
            #expect(seen.last?.index == 3, "the last tick reached the consumer")
            for (previous, tick) in zip(seen, seen.dropFirst()) {
                #expect(tick.index - previous.index - 1 <= tick.missed, "a handler call the consumer never saw is counted in missed")
            }
            if !kind.isRealTime {
                #expect(seen.map(\.index) == [0, 1, 3])
                #expect(seen.map(\.missed) == [0, 0, 1])
            }
        }

        static func aBurstingSequenceDeliversEveryMissedTick(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let ticks = try h.backend.ticks(.every(ms(10), count: 5), missedTicks: .burst)
            let clock = h.backend.clock
            let (seen, asked) = try await h.drive {
                var seen: [Tick] = []
                var asked: [MonotonicInstant] = []
                var iterator = ticks.makeAsyncIterator()
                while true {
                    asked.append(clock.now)
                    guard let tick = await iterator.next() else { break }
                    seen.append(tick)
                    if tick.index == 0 { try await clock.sleep(for: ms(35)) }
                }
                return (seen, asked)
            }
            #expect(seen.count == 5)
            for (tick, asked) in zip(seen, asked) { expectOnTime(tick, notBefore: asked, on: kind) }
            for (k, tick) in seen.enumerated() {
                #expect(tick.scheduled == seen[0].scheduled + ms(10) * k)
                #expect(tick.missed == 0)
            }
        }

        static func theSequenceEndsWhenItsTimerIsCancelledByNameOrItsBackendShutsDown(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let byName = try h.backend.ticks(.every(.seconds(3600)), name: "hourly")
            let consumer = Task(executorPreference: h.taskExecutor) {
                var count = 0
                for await _ in byName { count += 1 }
                return count
            }
            await h.manual?.settle()
            try h.registry.cancel(named: "hourly")
            #expect(await consumer.value == 0)

            let untilShutdown = try h.backend.ticks(.every(.seconds(3600)))
            let waiting = Task(executorPreference: h.taskExecutor) {
                var count = 0
                for await _ in untilShutdown { count += 1 }
                return count
            }
            await h.manual?.settle()
            h.backend.shutdown()
            #expect(await waiting.value == 0)
        }

        static func cancellingTheConsumersTaskOrDroppingTheSequenceCancelsTheTimer(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let ticks = try h.backend.ticks(.every(.seconds(3600)), name: "consumed")
            let consumer = Task(executorPreference: h.taskExecutor) {
                for await _ in ticks {}
            }
            await h.manual?.settle()
            consumer.cancel()
            await consumer.value
            #expect(await waitForAsync { h.registry.count == 0 })
            #expect(ticks.timer.currentState == .cancelled)

            var dropped: TimerTicks? = try h.backend.ticks(.every(.seconds(3600)), name: "dropped")
            #expect(h.registry.count == 1)
            _ = dropped
            dropped = nil
            #expect(h.registry.count == 0, "a sequence dropped without being iterated cancels its timer")
        }

        static func aSequenceIsIteratedOnce(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let ticks = try h.backend.ticks(.every(ms(1), count: 2))
            let (fromSecond, fromFirst) = try await h.drive {
                var first = ticks.makeAsyncIterator()
                var second = ticks.makeAsyncIterator()
                return (await second.next(), await first.next())
            }
            #expect(fromSecond == nil, "the first iterator made gets the ticks; later ones end at once")
            #expect(fromFirst?.index == 0)
        }

        // MARK: scheduleAsync

        static func repeatsOfATaskAreFixedDelayAndNeverOverlap(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let runs = Locked<[(tick: Tick, start: MonotonicInstant, end: MonotonicInstant)]>([])
            let inFlight = Locked(0)
            let overlaps = Counter()
            let clock = h.backend.clock
            // The tasks run on the harness's thread: on the global executor, a test suite's
            // blocking tests could hold them back past any watchdog (see `makeHarness`).
            let timer = try h.backend.scheduleAsync(.every(ms(5), count: 3), name: "task", executorPreference: h.taskExecutor) { tick in
                if inFlight.withLock({
                    $0 += 1
                    return $0
                }) > 1 {
                    overlaps.increment()
                }
                let start = clock.now
                try? await clock.sleep(for: ms(20))  // a task slower than the interval
                let end = clock.now
                runs.withLock { $0.append((tick, start, end)) }
                inFlight.withLock { $0 -= 1 }
            }
            #expect(try await h.drive { try await timer.ended } == .completed)
            let recorded = runs.current
            #expect(recorded.count == 3)
            #expect(overlaps.current == 0)
            for (previous, run) in zip(recorded, recorded.dropFirst()) {
                #expect(run.start - previous.end >= ms(5), "the next run waits a full interval after the last returned")
            }
            // The timer's fires are the backend's; the tasks they start, and so the runs' starts
            // and ends, wait for the harness's thread, which a loaded machine may not run at
            // once: only the fires are held to the bound.
            for run in recorded { expectOnTime(run.tick, "the fire that started run \(run.tick.index)", on: kind) }
            #expect(timer.currentState == .finished)
            // The last sleep's timer leaves the registry just after its handler woke the task.
            #expect(await waitForAsync { h.registry.count == 0 })
        }

        static func cancellingATaskTimerCancelsItsRunningTaskAndEndedWaitsForIt(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let started = Counter()
            let sawCancellation = Locked(false)
            let returned = Locked(false)
            let clock = h.backend.clock
            let timer = try h.backend.scheduleAsync(.every(ms(5)), executorPreference: h.taskExecutor) { _ in
                started.increment()
                do { try await clock.sleep(for: .seconds(3600)) } catch { sawCancellation.withLock { $0 = Task.isCancelled } }
                returned.withLock { $0 = true }
            }
            try await h.drive { while started.current == 0 { try await clock.sleep(for: ms(1)) } }
            timer.cancel()
            #expect(try await h.drive { try await timer.ended } == .cancelled)
            #expect(returned.current, "ended returned only after the running task did")
            #expect(sawCancellation.current)
            #expect(started.current == 1)
        }

        static func endedReturnsOnceATimerHasEndedAndItsHandlerReturned(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let oneShot = try h.backend.schedule(.after(ms(5))) { _ in }
            #expect(try await h.drive { try await oneShot.ended } == .completed)
            #expect(oneShot.currentState == .finished)
            let repeating = try h.backend.schedule(.every(.seconds(3600))) { _ in }
            repeating.cancel()
            #expect(try await repeating.ended == .cancelled)  // already over: returns at once
        }

        static func aTimeoutAroundEndedReturnsWhenItRunsOut(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let repeating = try h.backend.schedule(.every(.seconds(3600)), name: "long") { _ in }
            // A timeout around the wait: the group cancels the waiter when the time is up.
            let outcome = await withTaskGroup(of: String.self) { group in
                group.addTask {
                    do {
                        _ = try await repeating.ended
                        return "ended"
                    } catch {
                        return "\(type(of: error)), timer \(repeating.currentState)"
                    }
                }
                group.addTask {
                    try? await Task.sleep(for: ms(20))
                    return "timed out"
                }
                let first = await group.next()
                group.cancelAll()
                return [first, await group.next()].compactMap { $0 }.joined(separator: "; ")
            }
            #expect(outcome == "timed out; CancellationError, timer scheduled")
            // Already cancelled before it waits: it throws at once.
            let cancelled = Task(executorPreference: h.taskExecutor) {
                withUnsafeCurrentTask { $0?.cancel() }
                do {
                    _ = try await repeating.ended
                    return false
                } catch { return true }
            }
            #expect(await cancelled.value)
            repeating.cancel()
            #expect(try await repeating.ended == .cancelled)
        }

        static func aTaskMayBeIsolatedToTheMainActor(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let ran = Locked(false)
            let timer = try h.backend.scheduleAsync(.after(ms(2)), executorPreference: h.taskExecutor) { @MainActor _ in
                // The runtime's own check (it traps off the main actor's executor; under
                // `swift test` on Linux that executor is not the main thread, so
                // Thread.isMainThread cannot tell).
                MainActor.assertIsolated()
                ran.withLock { $0 = true }
            }
            #expect(try await h.drive { try await timer.ended } == .completed)
            #expect(ran.current)
        }

        static func aTaskTimersTasksRunOnTheExecutorTheyPrefer(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let backend = h.backend
            let onLoop = Locked<[Bool]>([])
            let timer = try backend.scheduleAsync(.every(ms(2), count: 2), executorPreference: backend.taskExecutor) { _ in
                onLoop.withLock { $0.append(backend.scheduler.isOnLoop) }
                try? await backend.clock.sleep(for: ms(1))  // and it resumes there
                onLoop.withLock { $0.append(backend.scheduler.isOnLoop) }
            }
            #expect(try await h.drive { try await timer.ended } == .completed)
            // On virtual time the loop is the test's own executor, which no thread owns.
            #expect(onLoop.current == (kind.isRealTime ? [true, true, true, true] : [false, false, false, false]))

            // An executor of the caller's: a thread (on virtual time, the test's executor is the
            // one that time's steps settle).
            guard kind.isRealTime else { return }
            let ownThread = ThreadTaskExecutor()
            defer { ownThread.stop() }
            let onOwnThread = Locked<[Bool]>([])
            let onThread = try backend.scheduleAsync(.after(ms(2)), executorPreference: ownThread) { _ in
                onOwnThread.withLock { $0.append(ownThread.isCurrent) }
                try? await backend.clock.sleep(for: ms(1))
                onOwnThread.withLock { $0.append(ownThread.isCurrent) }
            }
            #expect(try await onThread.ended == .completed)
            #expect(onOwnThread.current == [true, true])
        }

        // MARK: Tasks on the loop (taskExecutor)

        static func aTaskOnTheLoopRunsThereAndResumesThereFromItsTimers(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let backend = h.backend
            // Nothing is scheduled: the first job has to wake an idle loop.
            let onLoop = try await Task(executorPreference: backend.taskExecutor) {
                var onLoop = [backend.scheduler.isOnLoop]
                try await backend.clock.sleep(for: ms(2))
                onLoop.append(backend.scheduler.isOnLoop)
                for await tick in try backend.ticks(.every(ms(2), count: 3)) {
                    onLoop.append(backend.scheduler.isOnLoop && tick.index < 3)
                }
                // A job from another thread (this task's own resumption) while a timer an hour
                // away is armed: the wake-up must not wait for it, nor disarm it.
                let far = try backend.schedule(.after(.seconds(3600))) { _ in }
                await withCheckedContinuation { continuation in onBackgroundThread { continuation.resume() } }
                onLoop.append(backend.scheduler.isOnLoop)
                far.cancel()
                return onLoop
            }.value
            #expect(onLoop == [true, true, true, true, true, true])
            // The loop still fires timers after running jobs.
            let fired = Locked(false)
            try backend.schedule(.after(ms(5))) { _ in fired.withLock { $0 = true } }
            #expect(h.waitUntil { fired.current })
        }

        static func aTaskThatKeepsYieldingOnTheLoopDoesNotStarveItsTimers(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let backend = h.backend
            let fires = Locked(0)
            let (yields, timer) = try await Task(executorPreference: backend.taskExecutor) {
                // Scheduled from the task, on the loop: no tick can fire before the first yield
                // (on a busy machine a task started late found all five fired already).
                let timer = try backend.schedule(.every(ms(2), count: 5)) { _ in fires.withLock { $0 += 1 } }
                var yields = 0
                // Ends only if the timer gets to fire in between the yields.
                while fires.current < 5 {
                    await Task.yield()
                    yields += 1
                }
                return (yields, timer)
            }.value
            #expect(yields > 0)
            #expect(timer.currentState == .finished || h.waitUntil { timer.currentState == .finished })
        }

        static func tasksOnTheLoopCarryOnAfterTheBackendShutsDown(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let backend = h.backend
            let sleeping = Task(executorPreference: backend.taskExecutor) { () -> String in
                do {
                    try await backend.clock.sleep(for: .seconds(3600))
                    return "woke"
                } catch {
                    // Resumed by the shutdown; the loop is gone, so this runs elsewhere.
                    return "\(error) on loop: \(backend.scheduler.isOnLoop)"
                }
            }
            #expect(await waitForAsync { h.registry.count == 1 })
            // The sleep is registered inside the task's first job, before the task suspends. A
            // job queued behind it on the loop runs once that job is over: then the task waits.
            await Task(executorPreference: backend.taskExecutor) {}.value
            backend.shutdown()
            #expect(await sleeping.value == "\(TimerError.backendShutDown(backend: backend.name)) on loop: false")
            // A task started after the shutdown runs too.
            #expect(await Task(executorPreference: backend.taskExecutor) { 42 }.value == 42)
        }

        static func aJobRunningWhenTheBackendShutsDownFinishesOnTheLoopFirst(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let backend = h.backend
            let inJob = DispatchSemaphore(value: 0)
            let finished = Locked(false)
            let job = Task(executorPreference: backend.taskExecutor) { () -> Bool in
                inJob.signal()
                blockRealTime(ms(50))  // a job that takes a while, shut down from outside meanwhile
                finished.withLock { $0 = true }
                return backend.scheduler.isOnLoop
            }
            let shutdownSawItFinished = Locked<Bool?>(nil)
            onBackgroundThread {
                inJob.wait()
                backend.shutdown()
                shutdownSawItFinished.withLock { $0 = finished.current }
            }
            #expect(await job.value, "the job finished on the loop")
            #expect(await waitForAsync { shutdownSawItFinished.current != nil })
            #expect(shutdownSawItFinished.current == true, "shutdown() returned before the running job did")
        }

        static func aTaskOnTheLoopMayShutTheBackendDown(_ kind: BackendUnderTest) async throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let backend = h.backend
            let timer = try backend.schedule(.every(ms(1))) { _ in }
            let after = try await Task(executorPreference: backend.taskExecutor) {
                try await backend.clock.sleep(for: ms(3))
                backend.shutdown()  // from the loop: returns at once, no waiting for itself
                await Task.yield()
                return backend.scheduler.hasShutDown
            }.value
            #expect(after)
            #expect(timer.currentState == .cancelled)
        }
    }
}
