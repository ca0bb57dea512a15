import Dispatch
import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit

/// An object whose `deinit` calls back into TimerKit — cancels, waits, schedules, looks up
/// and snapshots timers of the same backend and registry — like the iOS habit
/// `deinit { timer.invalidate() }`. If TimerKit releases it while holding a lock, the
/// thread re-enters that lock: a hang in release builds, a crash in debug builds.
final class CallsBackOnDeinit: Sendable {
    let backend: any TimerBackend
    let other: TimerHandle
    let deinits: Counter

    init(_ backend: any TimerBackend, deinits: Counter) throws {
        self.backend = backend
        self.deinits = deinits
        other = try backend.schedule(.after(.seconds(3600))) { _ in }
    }

    deinit {
        other.cancelAndWait()
        if let fresh = try? backend.schedule(.after(.seconds(3600)), handler: { _ in }) {
            _ = backend.registry.timer(named: fresh.name)
            try? fresh.suspend()
            fresh.cancel()
        }
        _ = backend.registry.snapshot()
        _ = backend.registry.count
        _ = backend.registry.timer(named: other.name)
        deinits.increment()
    }
}

/// A key's callback that shuts its backend down when told its timer has ended, and records why.
package final class ShutsDownWhenEnded: TimerCallback {
    let backend: any TimerBackend
    let told: Locked<[TimerEndReason]>

    package init(_ backend: any TimerBackend, told: Locked<[TimerEndReason]>) {
        self.backend = backend
        self.told = told
    }

    package func timerFired(_ fire: TimerFire) {}

    package func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) {
        backend.shutdown()
        told.withLock { $0.append(reason) }
    }
}

extension Checks {
    enum Adversarial {
        // MARK: Releases that call back

        static func aFinishedOneShotsCapturesMayCallBackWhenReleased(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let deinits = Counter()
            let fired = Counter()
            for _ in 0..<3 {
                let captured = try CallsBackOnDeinit(h.backend, deinits: deinits)
                try h.backend.schedule(.after(ms(1))) { _ in
                    withExtendedLifetime(captured) { fired.increment() }
                }
            }
            // The closures now hold the last references: they go when the one-shots finish.
            #expect(h.waitUntil { deinits.current == 3 })
            #expect(fired.current == 3)
            #expect(h.waitUntil { h.registry.count == 0 })
        }

        static func aCancelledTimersCapturesMayCallBackWhenReleased(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let deinits = Counter()
            let fired = Counter()
            var timers: [TimerHandle] = []
            for _ in 0..<2 {
                let captured = try CallsBackOnDeinit(h.backend, deinits: deinits)
                timers.append(try h.backend.schedule(.every(ms(1))) { _ in withExtendedLifetime(captured) { fired.increment() } })
            }
            // One cancels itself from inside its handler, one is cancelled from another thread.
            let selfCancelling = try CallsBackOnDeinit(h.backend, deinits: deinits)
            try h.backend.schedule(.every(ms(1))) { tick in
                withExtendedLifetime(selfCancelling) { tick.timer.cancel() }
            }
            _ = consume selfCancelling
            #expect(h.waitUntil { fired.current >= 2 })
            onBackgroundThread { [timers] in timers[0].cancel() }
            timers[1].cancel()
            #expect(h.waitUntil { deinits.current == 3 })
        }

        static func aTargetReleasedDuringItsActionMayCallBackFromItsDeinit(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let deinits = Counter()
            let holder = Locked<CallsBackOnDeinit?>(try CallsBackOnDeinit(h.backend, deinits: deinits))
            let target = try #require(holder.current)
            let timer = try h.backend.schedule(.every(ms(1)), target: target) { _, _ in
                // Drops the only other reference: the fire path's is the last one.
                holder.withLock { $0 = nil }
            }
            _ = consume target
            #expect(h.waitUntil { deinits.current == 1 })
            #expect(h.waitUntil { timer.currentState == .cancelled })
            #expect(h.waitUntil { h.registry.count == 0 })
        }

        static func observersMayCallBackWhenReleased(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let deinits = Counter()
            let fired = Counter()
            // A registry observer, removed from inside a handler.
            let forRegistry = try CallsBackOnDeinit(h.backend, deinits: deinits)
            let token = h.registry.addObserver(TimerObserver(willFire: { _ in withExtendedLifetime(forRegistry) {} }))
            _ = consume forRegistry
            // A per-timer observer: released with the timer, once it has finished.
            let forTimer = try CallsBackOnDeinit(h.backend, deinits: deinits)
            // An hour away until its observer is in place: on a busy machine 2 ms can pass first.
            let observed = try h.backend.schedule(.after(.seconds(3600))) { _ in
                h.registry.removeObserver(token)
                fired.increment()
            }
            try observed.addObserver(TimerObserver(didFire: { _, _ in withExtendedLifetime(forTimer) {} }))
            try observed.reschedule(.after(ms(2)))
            _ = consume forTimer
            _ = consume observed
            #expect(h.waitUntil { fired.current == 1 })
            #expect(
                h.waitUntil {
                    _ = h.registry.count
                    return deinits.current == 2
                })
        }

        static func shutdownMayReleaseCapturesThatCallBack(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            let deinits = Counter()
            for index in 0..<4 {
                let captured = try CallsBackOnDeinit(h.backend, deinits: deinits)
                let timer = try h.backend.schedule(.every(.seconds(60))) { _ in withExtendedLifetime(captured) {} }
                if index.isMultiple(of: 2) { try timer.suspend() }
            }
            h.shutdown()
            #expect(deinits.current == 4)
        }

        // MARK: Cancel racing fire

        /// Each timer is alone in its backend when it is cancelled at about its deadline, so
        /// the cancel also disarms the native wake-up while the loop may be firing it: the
        /// most common race in a server (a timeout cancelled as it expires).
        static func cancellingAtTheMomentOfFiringNeverHangsNorFiresAfterwards(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let waitedOut = Locked<Set<UInt64>>([])
            let lateCalls = Counter()
            let fired = Counter()
            let stopDriving = Locked(false)
            if let manual = h.manual {
                onBackgroundThread {
                    while !stopDriving.current { manual.advance(by: .microseconds(50)) }
                }
            }
            onThreads(2) { _ in
                var rng = SystemRandomNumberGenerator()
                for _ in 0..<300 {
                    let delay = Duration.microseconds(Int64.random(in: 50...600, using: &rng))
                    guard
                        let timer = try? h.backend.schedule(
                            .after(delay),
                            handler: { tick in
                                if waitedOut.current.contains(tick.timer.id) { lateCalls.increment() }
                                fired.increment()
                            })
                    else { continue }
                    if kind.isRealTime { blockRealTime(delay) }
                    timer.cancelAndWait()
                    waitedOut.withLock { _ = $0.insert(timer.id) }
                }
            }
            stopDriving.withLock { $0 = true }
            h.pass(ms(20))
            #expect(lateCalls.current == 0, "a handler began after its timer's cancelAndWait() returned")
            #expect(h.waitUntil { h.registry.count == 0 })
        }

        static func suspendResumeAndRescheduleRacingFireKeepTheirPromises(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let waitedOut = Locked(false)
            let lateCalls = Counter()
            let fired = Counter()
            let timer = try h.backend.schedule(.every(ms(1))) { _ in
                if waitedOut.current { lateCalls.increment() }
                fired.increment()
            }
            let stopDriving = Locked(false)
            if let manual = h.manual {
                onBackgroundThread {
                    while !stopDriving.current { manual.advance(by: .microseconds(100)) }
                }
            }
            onThreads(3) { worker in
                var rng = SystemRandomNumberGenerator()
                for step in 0..<400 {
                    switch (worker + step) % 3 {
                    case 0: try? timer.suspend()
                    case 1: try? timer.resume()
                    default: try? timer.reschedule(.every(.microseconds(Int64.random(in: 300...2000, using: &rng))))
                    }
                    if kind.isRealTime && step.isMultiple(of: 20) { blockRealTime(.microseconds(200)) }
                }
            }
            try? timer.resume()
            #expect(h.waitUntil { fired.current >= 1 })
            timer.cancelAndWait()
            waitedOut.withLock { $0 = true }
            stopDriving.withLock { $0 = true }
            h.pass(ms(20))
            #expect(lateCalls.current == 0)
            #expect(timer.currentState == .cancelled)
            #expect(h.waitUntil { h.registry.count == 0 })
        }

        static func toleranceBeyondTheIntervalIsCappedAtHalfOfIt(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let log = TickLog()
            // Uncapped, a lone timer fires at the end of its 500 ms window: every tick would be
            // 5 intervals late, 4 or more grid points counted missed, and the rate would drop.
            // (100 ms ticks, not 10: a tick 40 ms late is what a loaded machine under
            // ThreadSanitizer does to every one of five; 400 ms late it does not.)
            try h.backend.schedule(.every(ms(100)), tolerance: ms(500), handler: log.record)
            #expect(h.waitUntil { log.count >= 5 })
            let ticks = log.all.prefix(5)
            for (previous, tick) in zip(ticks, ticks.dropFirst()) {
                #expect((tick.scheduled - previous.scheduled).components.attoseconds % 100_000_000_000_000_000 == 0)
            }
            // Each may come the capped tolerance late, not the 500 ms asked for.
            for tick in ticks { expectOnTime(tick, allowing: ms(50), on: kind) }
            if !kind.isRealTime {
                #expect(ticks.allSatisfy { $0.missed == 0 && $0.lateness == ms(50) })
                #expect(zip(ticks, ticks.dropFirst()).allSatisfy { $1.scheduled - $0.scheduled == ms(100) })
            } else {
                // Capped, a tick misses a grid point only when the machine is late, and not by
                // 350 ms on every one of five.
                #expect(ticks.contains { $0.missed < 4 }, "with the cap, ticks are not the window late by design")
            }
        }

        // MARK: Shutdown

        static func shutdownFromInsideAHandler(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let returned = Counter()
            let other = try h.backend.schedule(.every(ms(1))) { _ in }
            try h.backend.schedule(.after(ms(2))) { _ in
                h.backend.shutdown()  // must not wait for itself, nor join its own thread
                returned.increment()
            }
            #expect(h.waitUntil { returned.current == 1 })
            #expect(other.currentState == .cancelled)
            #expect(throws: TimerError.backendShutDown(backend: h.backend.name)) { try h.backend.schedule(.after(ms(1))) { _ in } }
            #expect(h.waitUntil { h.registry.count == 0 })
        }

        /// The owner of a backend usually runs where its handlers run: a block on the queue a
        /// Dispatch backend targets, a callback of the caller's libevent or run loop.
        static func shutdownFromTheCallersQueueOrLoop(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let fired = Counter()
            try h.backend.schedule(.every(ms(1))) { _ in fired.increment() }
            #expect(h.waitUntil { fired.current >= 2 })
            let done = DispatchSemaphore(value: 0)
            h.onCallerContext {
                h.backend.shutdown()
                done.signal()
            }
            #expect(done.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(h.registry.count == 0)
        }

        static func afterShutdownReturnsNoHandlerIsRunning(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let entered = DispatchSemaphore(value: 0)
            let running = Locked(false)
            try h.backend.schedule(.after(ms(1))) { _ in
                running.withLock { $0 = true }
                entered.signal()
                blockRealTime(ms(100))
                running.withLock { $0 = false }
            }
            h.driveInBackground(for: ms(5))
            #expect(entered.wait(timeout: .now() + .seconds(10)) == .success)
            h.backend.shutdown()
            #expect(!running.current, "shutdown() returned while a handler of the backend was still running")
            #expect(h.registry.count == 0)
        }

        static func shutdownWhileOtherThreadsSchedule(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let accepted = Locked<[TimerHandle]>([])
            let unexpected = Locked<[TimerError]>([])
            let started = DispatchSemaphore(value: 0)
            let finished = DispatchSemaphore(value: 0)
            for _ in 0..<3 {
                onBackgroundThread {
                    defer { finished.signal() }
                    started.signal()
                    var rng = SystemRandomNumberGenerator()
                    while true {
                        do throws(TimerError) {
                            let timer = try h.backend.schedule(.after(.microseconds(Int64.random(in: 0...3000, using: &rng)))) { _ in }
                            accepted.withLock { $0.append(timer) }
                        } catch .backendShutDown {
                            return
                        } catch {
                            unexpected.withLock { $0.append(error) }
                            return
                        }
                    }
                }
            }
            for _ in 0..<3 { started.wait() }
            // Real time on every backend: on Manual, advancing virtual time while three threads
            // keep adding timers due inside the window would fire them forever.
            blockRealTime(ms(10))
            h.backend.shutdown()
            for _ in 0..<3 { #expect(finished.wait(timeout: .now() + .seconds(10)) == .success) }
            // No waiting from here: once shutdown has returned and the schedulers have, it is all over.
            #expect(unexpected.current.isEmpty)
            #expect(accepted.current.allSatisfy { !$0.isActive }, "every accepted timer ended")
            #expect(h.registry.count == 0)
        }

        /// Two timers an hour away whose end callbacks shut their backend down: a handle's
        /// `onEnd` action and a key's `timerEnded`. Returns where they record why they ended.
        private static func scheduleTimersThatShutDownWhenEnded(on backend: any TimerBackend) throws -> Locked<[TimerEndReason]> {
            let told = Locked<[TimerEndReason]>([])
            let timer = try backend.schedule(.after(.seconds(3600))) { _ in }
            timer.onEnd { reason in
                backend.shutdown()
                told.withLock { $0.append(reason) }
            }
            try backend.schedule(.after(.seconds(3600)), calling: ShutsDownWhenEnded(backend, told: told))
            return told
        }

        /// `shutdown()` is idempotent, and end callbacks run outside the locks "so either may call
        /// back into the backend": one called from an `onEnd` action or a `timerEnded` that the
        /// shutdown itself runs finds it done and returns, and so does the shutdown that ran them.
        static func shutdownFromAnEndCallbackOfThatShutdownReturns(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let told = try scheduleTimersThatShutDownWhenEnded(on: h.backend)
            let returned = DispatchSemaphore(value: 0)
            onBackgroundThread {
                h.backend.shutdown()
                returned.signal()
            }
            #expect(returned.wait(timeout: .now() + .seconds(20)) == .success, "shutdown() never returned")
            #expect(told.current == [.backendShutDown, .backendShutDown])
            #expect(throws: TimerError.backendShutDown(backend: h.backend.name)) { try h.backend.schedule(.after(ms(1))) { _ in } }
        }

        /// A loop that stops on an error shuts its scheduler down with it (`fail(with:)`), on the
        /// loop's own thread; end callbacks that hear `.loopFailed` and shut the backend down there
        /// return, and every timer ends with that reason.
        static func endCallbacksOfALoopFailureMayShutTheBackendDown(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let cause = TimerError.nativeFailure(backend: h.backend.name, call: "a failure the check makes")
            let told = try scheduleTimersThatShutDownWhenEnded(on: h.backend)
            let failed = Counter()
            try h.backend.schedule(.after(ms(1))) { _ in
                h.backend.scheduler.fail(with: cause)  // as a loop does when its wait fails
                failed.increment()
            }
            #expect(h.waitUntil(.seconds(20)) { failed.current == 1 }, "the handler that failed the loop never returned")
            #expect(told.current == [.loopFailed(cause), .loopFailed(cause)])
            #expect(throws: TimerError.loopFailed(backend: h.backend.name, cause: cause)) {
                try h.backend.schedule(.after(ms(1))) { _ in }
            }
        }

        static func resumeAndRescheduleAfterShutdownAreRefused(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let timer = try h.backend.schedule(.every(ms(5)), name: "paused") { _ in }
            try timer.suspend()
            h.backend.shutdown()
            let ended = TimerError.timerEnded(name: "paused", state: .cancelled)
            #expect(throws: ended) { try timer.resume() }
            #expect(throws: ended) { try timer.reschedule(.after(ms(1))) }
        }
    }
}
