#if NIO
    import Dispatch
    import Foundation
    import Glibc
    import NIOCore
    import NIOEmbedded
    import NIOPosix
    import Testing
    @_spi(BackendImplementation) import TimerKit
    import TimerKitConformance

    @testable import TimerKitNIO

    @Suite("TimerKitNIO")
    struct NIOBackendTests {
        @Test func nioDeadlinesAndMonotonicInstantsCountTheSameClock() {
            let before = MonotonicInstant.now()
            let deadline = NIODeadline.now()
            let after = MonotonicInstant.now()
            #expect(MonotonicInstant(deadline) >= before)
            #expect(MonotonicInstant(deadline) <= after)
            #expect(NIODeadline(before) == .uptimeNanoseconds(before.nanoseconds))
            #expect(NIODeadline(MonotonicInstant.distantFuture) == .distantFuture)
            #expect(MonotonicInstant(NIODeadline(before)) == before)
        }
    }

    extension NIOBackendTests {
        /// The scheduler the backend lends unretained to a key's calls (`unretainedScheduler`,
        /// for backend implementors) is its own, and those calls reach it.
        @Test func itLendsItsOwnSchedulerUnretained() throws {
            let loop = EmbeddedEventLoop()
            let backend = NIOBackend(on: loop, registry: TimerRegistry())
            defer { backend.shutdown() }
            #expect(backend.unretainedScheduler.takeUnretainedValue() === backend.scheduler)
            final class Quiet: TimerCallback { func timerFired(_ fire: TimerFire) {} }
            let key = try backend.schedule(.after(.seconds(3600)), name: "lent", calling: Quiet())
            #expect(backend.registry.timer(named: "lent") != nil)
            backend.cancel(key)
            #expect(!backend.isActive(key))
            #expect(backend.registry.timer(named: "lent") == nil)
        }

        /// How a NIO user tests timer code: on an `EmbeddedEventLoop` the backend reads the loop's
        /// virtual time, and `advanceTime(by:)` fires what came due, synchronously, in order.
        @Test func onAnEmbeddedLoopTimersFollowTheLoopsVirtualTime() throws {
            try withWatchdog {
                let loop = EmbeddedEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                defer { backend.shutdown() }
                let fired = Locked<[Int]>([])
                let timer = try backend.schedule(.every(.seconds(1), count: 3), name: "heartbeat") { tick in
                    fired.withLock { $0.append(tick.index) }
                }
                loop.advanceTime(by: .milliseconds(999))
                #expect(fired.current == [])
                loop.advanceTime(by: .milliseconds(1))
                #expect(fired.current == [0])
                loop.advanceTime(by: .seconds(5))
                #expect(fired.current == [0, 1, 2])
                #expect(timer.currentState == .finished)
                #expect(backend.registry.snapshot().isEmpty)
            }
        }

        /// On an `EmbeddedEventLoop` the wall and continuous clocks are the loop's virtual time too:
        /// fixed to the system's when the backend starts, they move only with `advanceTime(by:)`.
        @Test func onAnEmbeddedLoopTheWallClockFollowsTheLoopsVirtualTime() throws {
            try withWatchdog {
                let loop = EmbeddedEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                defer { backend.shutdown() }
                let start = backend.wallClock
                #expect(abs(start.timeIntervalSinceNow) < 60, "it starts at the system's date")
                let fired = Locked<[Date]>([])
                try backend.schedule(.at(date: start.addingTimeInterval(2))) { _ in fired.withLock { $0.append(backend.wallClock) } }
                try backend.schedule(.after(.seconds(2), on: .continuous)) { _ in fired.withLock { $0.append(backend.wallClock) } }
                usleep(20_000)
                #expect(backend.wallClock == start, "real time passing does not move it")
                loop.advanceTime(by: .milliseconds(1_999))
                #expect(fired.current.isEmpty)
                // A Date resolves a quarter of a microsecond: the date's deadline may lie that far after 2 s.
                loop.advanceTime(by: .milliseconds(2))
                #expect(fired.current.count == 2)
                #expect(abs(backend.wallClock.timeIntervalSince(start) - 2.001) < 1e-6)
            }
        }

        /// A connected `EmbeddedChannel` with a 30 s `IdleTimeoutHandler` on a backend of its loop.
        private func connectionWithIdleTimeout() throws -> (EmbeddedChannel, NIOBackend) {
            let channel = EmbeddedChannel()
            let backend = NIOBackend(on: channel.embeddedEventLoop, registry: TimerRegistry())
            try channel.pipeline.syncOperations.addHandler(IdleTimeoutHandler(timers: backend, timeout: .seconds(30)))
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 7)).wait()
            return (channel, backend)
        }

        @Test func anIdleConnectionIsClosedAndABusyOneIsNot() throws {
            try withWatchdog {
                let (channel, backend) = try connectionWithIdleTimeout()
                defer { backend.shutdown() }
                #expect(channel.isActive)
                #expect(backend.registry.snapshot().count == 1)
                for _ in 0..<3 {
                    channel.embeddedEventLoop.advanceTime(by: .seconds(20))
                    try channel.writeInbound(ByteBuffer(string: "ping"))
                    _ = try channel.readInbound(as: ByteBuffer.self)
                }
                #expect(channel.isActive)  // 60 s in all, but never 30 s of silence
                channel.embeddedEventLoop.advanceTime(by: .seconds(30))
                #expect(!channel.isActive)
                #expect(backend.registry.snapshot().isEmpty)
            }
        }

        @Test func closingTheConnectionCancelsItsTimer() throws {
            try withWatchdog {
                let (channel, backend) = try connectionWithIdleTimeout()
                defer { backend.shutdown() }
                #expect(backend.registry.snapshot().count == 1)
                _ = try channel.finish()
                #expect(backend.registry.snapshot().isEmpty)
            }
        }

        /// The same on `NIOAsyncTestingEventLoop`, the async tests' loop: `await advanceTime(by:)`.
        @Test func onAnAsyncTestingLoopTimersFollowTheLoopsVirtualTime() async throws {
            try await withWatchdog {
                let loop = NIOAsyncTestingEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                let fired = Locked<[Int]>([])
                try backend.schedule(.every(.seconds(1), count: 2)) { tick in fired.withLock { $0.append(tick.index) } }
                await loop.advanceTime(by: .milliseconds(999))
                #expect(fired.current == [])
                await loop.advanceTime(by: .seconds(2))
                #expect(fired.current == [0, 1])
                backend.shutdown()
                await loop.shutdownGracefully()
            }
        }
    }

    /// The driver contract on NIO: `wake(at:)` never waits for the loop, moving the wake-up or
    /// disarming never cancels a NIO callback, and a loop that shuts down first is noticed, never
    /// called again.
    @Suite("NIOBackend's wake-up")
    struct NIOWakeUpTests {
        /// A handler runs on a `NIOAsyncTestingEventLoop` (driven by `advanceTime`) while another
        /// thread schedules a timer: that schedule must not wait for the loop, which is busy with
        /// the handler (it used to, under the scheduler's lock, and the two waited for each other).
        @Test func aScheduleFromAnotherThreadNeverWaitsForTheLoop() async throws {
            try await withWatchdog(seconds: 20) {
                let loop = NIOAsyncTestingEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                let scheduledMeanwhile = DispatchSemaphore(value: 0)
                let earlierFired = Locked(false)
                let outcome = Locked<String?>(nil)
                try backend.schedule(.after(.seconds(10))) { _ in
                    onBackgroundThread {
                        _ = try? backend.schedule(.after(.milliseconds(1))) { _ in earlierFired.withLock { $0 = true } }
                        scheduledMeanwhile.signal()
                    }
                    let waited = scheduledMeanwhile.wait(timeout: .now() + .seconds(5))
                    outcome.withLock { $0 = waited == .success ? "returned" : "waited for the loop" }
                }
                await loop.advanceTime(by: .seconds(10))
                #expect(outcome.current == "returned")
                await loop.advanceTime(by: .milliseconds(1))
                #expect(earlierFired.current, "the deadline recorded off the loop was applied on it")
                backend.shutdown()
                await loop.shutdownGracefully()
            }
        }

        /// Re-arming after a fire, moving the wake-up earlier, and disarming never cancel a NIO
        /// callback (NIO's cancel searches its whole task queue): the old ones fire as no-ops.
        @Test func movingTheWakeUpNeverCancelsANIOCallback() throws {
            try withWatchdog {
                let loop = EmbeddedEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                defer { backend.shutdown() }
                let fires = Counter()
                try backend.schedule(.every(.milliseconds(1))) { _ in fires.increment() }
                for _ in 0..<100 { loop.advanceTime(by: .milliseconds(1)) }
                #expect(fires.current == 100)
                let earlier = Counter()
                for step in 0..<50 {
                    try backend.schedule(.after(.microseconds(900 - step))) { _ in earlier.increment() }
                }
                loop.advanceTime(by: .milliseconds(1))
                #expect(earlier.current == 50)
                #expect(fires.current == 101)
                #expect(backend.cancelledCallbackCount == 0)
                backend.registry.cancelAll()  // the heap empties: disarming cancels nothing either
                #expect(backend.cancelledCallbackCount == 0)
            }
        }

        /// With `SWIFTNIO_STRICT` set, NIO stops the program when work reaches a loop that has shut
        /// down. A backend whose loop shuts down first (with timers, or with none) shuts down with
        /// `loopFailed` and never calls that loop again.
        @Test func aLoopThatShutsDownFirstEndsItsBackendsUnderStrictNIO() async {
            await #expect(processExitsWith: .success) {
                setenv("SWIFTNIO_STRICT", "1", 1)
                let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
                // The backends go before the process exits: LeakSanitizer takes the side table of
                // an object that was held weakly for a leak while the object lives on to the exit
                // (the object's header holds that pointer in a form it cannot read).
                do {
                    let busy = NIOBackend(on: group.next(), registry: TimerRegistry())
                    let idle = NIOBackend(on: group.next(), registry: TimerRegistry())
                    let timer = try busy.schedule(.every(.seconds(3600))) { _ in }
                    try await group.shutdownGracefully()
                    for backend in [busy, idle] {
                        guard waitFor(.seconds(10), { backend.scheduler.hasShutDown }) else { exit(10) }
                        do throws(TimerError) {
                            try backend.schedule(.after(.seconds(1))) { _ in }
                            exit(11)
                        } catch {
                            guard case .loopFailed(backend: "nio", cause: _) = error else { exit(12) }
                        }
                    }
                    guard timer.currentState == .cancelled else { exit(13) }
                    busy.shutdown()
                    idle.shutdown()
                }
                exit(0)
            }
        }
    }

    extension NIOWakeUpTests {
        /// The loop shutting down first fails the backend (`loopShutDown`): end callbacks that
        /// hear `.loopFailed` and shut the backend down there return. (They waited for the
        /// shutdown their own thread was running.)
        @Test func endCallbacksOfALoopThatShutDownFirstMayShutTheBackendDown() throws {
            try withWatchdog {
                let loop = EmbeddedEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                let told = TimerKit.Locked<[TimerEndReason]>([])  // the type ShutsDownWhenEnded records into
                let timer = try backend.schedule(.after(.seconds(60))) { _ in }
                timer.onEnd { reason in
                    backend.shutdown()
                    told.withLock { $0.append(reason) }
                }
                try backend.schedule(.after(.seconds(60)), calling: ShutsDownWhenEnded(backend, told: told))
                try loop.syncShutdownGracefully()
                #expect(backend.scheduler.hasShutDown)
                #expect(told.current.count == 2)
                #expect(
                    told.current.allSatisfy {
                        if case .loopFailed = $0 { true } else { false }
                    })
            }
        }

        @Test func anEmbeddedLoopThatShutsDownFirstEndsABackendWithATimer() throws {
            try withWatchdog {
                let loop = EmbeddedEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                let timer = try backend.schedule(.after(.seconds(60))) { _ in }
                try loop.syncShutdownGracefully()
                #expect(backend.scheduler.hasShutDown)
                #expect(timer.currentState == .cancelled)
                #expect(throws: TimerError.self) { try backend.schedule(.after(.seconds(1))) { _ in } }
            }
        }

        @Test func anAsyncTestingLoopThatShutsDownFirstEndsABackendWithATimer() async throws {
            try await withWatchdog {
                let loop = NIOAsyncTestingEventLoop()
                let backend = NIOBackend(on: loop, registry: TimerRegistry())
                let timer = try backend.schedule(.after(.seconds(60))) { _ in }
                await loop.run()  // the deadline, set from off the loop, reaches it with the backend's hop
                await loop.shutdownGracefully()
                #expect(await waitForAsync { backend.scheduler.hasShutDown })
                #expect(timer.currentState == .cancelled)
                do throws(TimerError) {
                    try backend.schedule(.after(.seconds(1))) { _ in }
                    Issue.record("a backend whose loop has shut down accepted a timer")
                } catch {
                    guard case .loopFailed = error else { throw error }
                }
            }
        }
    }

    extension NIOBackendTests {
        /// Promise (README, "Never hangs, never spins"): a NIO backend dropped without `shutdown()`
        /// while it fires ends its timers; nothing hangs or crashes, on whichever thread the last
        /// reference goes, the loop's included.
        @Test func aBusyBackendDroppedWithoutShutdownEndsItsTimers() throws {
            try withWatchdog {
                let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
                defer { try? group.syncShutdownGracefully() }
                for _ in 0..<20 {
                    let registry = TimerRegistry()
                    var backend: NIOBackend? = NIOBackend(on: group.next(), registry: registry)
                    let fired = Locked(0)
                    try backend?.schedule(.every(.microseconds(20))) { _ in fired.withLock { $0 += 1 } }
                    #expect(waitFor { fired.current >= 10 })
                    backend = nil
                    #expect(waitFor { registry.count == 0 }, "its timer ends with it")
                }
            }
        }
    }
#endif
