import CLibevent
import Foundation
import Testing
import TimerKitLibevent
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

@Suite("Libevent backend")
struct LibeventTests {
    @Test func anOwnedBaseUsesPreciseTimersAndAKernelMethod() throws {
        let backend = try LibeventBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        #expect(!backend.isAttached)
        #expect(["epoll", "poll", "select"].contains(backend.method))
    }

    @Test func aBaseThatCannotBeMadeIsATypedError() {
        #expect(throws: TimerError.nativeFailure(backend: "libevent", call: "event_base_new_with_config")) {
            try LibeventBackend(options: .init(avoidMethods: ["epoll", "poll", "select"]), registry: TimerRegistry())
        }
    }

    /// libevent calls exit(1) when it cannot make a base's signal pipe. With room for fewer
    /// than the 5 descriptors a base needs, the backend refuses with a typed error instead,
    /// and with room for 5 it works.
    @Test(arguments: 0...5)
    func runningOutOfDescriptorsIsATypedErrorNotAnExit(_ room: Int) async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) { [room] in
            reportWithRoomForDescriptors(room) {
                do throws(TimerError) {
                    let backend = try LibeventBackend(registry: TimerRegistry())
                    backend.shutdown()
                    return room < 5 ? 10 : 0
                } catch .systemCall(let call, let code) where call == "event_base_new_with_config" && code == EMFILE {
                    return room >= 5 ? 20 : 0
                } catch {
                    FileHandle.standardError.write(Data("failed otherwise: \(error)\n".utf8))
                    return 20
                }
            }
            exit(0)
        }
        expectOutcome(result)
    }

    @Test func anAttachedBackendRunsHandlersOnTheCallersLoopThread() throws {
        let callerThread = Locked<UInt>(0)
        let handlerThread = Locked<UInt>(0)
        let fired = DispatchSemaphore(value: 0)
        let recordLoopThread: @Sendable () -> Void = { callerThread.withLock { $0 = UInt(pthread_self()) } }
        try withCallersLoop(onLoopThread: recordLoopThread) { base, _ in
            let backend = try LibeventBackend(attachedTo: base, registry: TimerRegistry())
            #expect(backend.isAttached)
            try backend.schedule(.after(.milliseconds(2))) { _ in
                handlerThread.withLock { $0 = UInt(pthread_self()) }
                fired.signal()
            }
            #expect(fired.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(handlerThread.current == callerThread.current)
            backend.shutdown()
        }
    }

    /// Runs `body` with a base of the caller's own (and its address, for `@Sendable` code),
    /// whose loop runs on a thread of its own; then stops that loop, as its owner would, and
    /// frees the base.
    private func withCallersLoop(
        onLoopThread: @escaping @Sendable () -> Void = {}, _ body: (OpaquePointer, UInt) throws -> Void
    ) throws {
        evthread_use_pthreads()
        let base = try #require(event_base_new())
        let address = UInt(bitPattern: base)
        let loop = try OwnedLoop(
            { _ in
                guard let base = OpaquePointer(bitPattern: address) else { return }
                onLoopThread()
                event_base_loop(base, Int32(EVLOOP_NO_EXIT_ON_EMPTY))
            }, release: {})
        defer {
            // A break from the loop's own thread cannot be lost.
            loop.stop {
                event_base_once(
                    base, -1, Int16(EV_TIMEOUT),
                    { _, _, argument in
                        if let base = OpaquePointer(argument) { event_base_loopbreak(base) }
                    }, UnsafeMutableRawPointer(base), nil)
            }
            event_base_free(base)
        }
        try body(base, address)
    }

    /// A burst of due timers on an attached base is fired in batches: the caller's own events
    /// run between them, instead of waiting for the whole burst.
    @Test func aBurstOfDueTimersLetsTheCallersEventsRunBetweenBatches() throws {
        try withWatchdog {
            try withCallersLoop { base, address in
                let backend = try LibeventBackend(attachedTo: base, registry: TimerRegistry())
                defer { backend.shutdown() }
                let probe = BurstProbe()
                let count = TimerScheduler.maxFiresPerCall * 3
                let deadline = backend.now() + .milliseconds(100)
                for _ in 0..<count {
                    try backend.schedule(.at(deadline)) { _ in
                        // The first handler adds an event of the caller's that is ready at once.
                        guard probe.fired.incrementAndGet() == 1, let base = OpaquePointer(bitPattern: address) else { return }
                        var now = timeval(tv_sec: 0, tv_usec: 0)
                        event_base_once(
                            base, -1, Int16(EV_TIMEOUT),
                            { _, _, argument in
                                guard let argument else { return }
                                let probe = Unmanaged<BurstProbe>.fromOpaque(argument).takeUnretainedValue()
                                probe.firedWhenTheCallerRan.withLock { $0 = probe.fired.current }
                            }, Unmanaged.passUnretained(probe).toOpaque(), &now)
                    }
                }
                #expect(waitFor { probe.fired.current == count })
                let seen = try #require(probe.firedWhenTheCallerRan.current)
                #expect(seen < count, "the caller's event waited for all \(count) handlers")
            }
        }
    }

    /// An owned loop that ends without being asked to (here: a loopbreak from outside) shuts
    /// its backend down with the reason, so timers are refused instead of never firing.
    @Test func aLoopThatEndsOnItsOwnShutsTheBackendDownWithTheReason() throws {
        let backend = try LibeventBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let fired = Counter()
        let timer = try backend.schedule(.every(.milliseconds(1))) { _ in fired.increment() }
        #expect(waitFor { fired.current >= 1 })  // the loop is running: a break now is not lost
        event_base_loopbreak(backend.eventBase)
        #expect(waitFor { backend.scheduler.failure != nil })
        let cause = TimerError.nativeFailure(backend: "libevent", call: "event_base_loop (returned 0)")
        #expect(backend.scheduler.failure == cause)
        // The failure is recorded first; the timers end after it, a slice at a time.
        #expect(waitFor { timer.currentState == .cancelled })
        #expect(throws: TimerError.loopFailed(backend: "libevent", cause: cause)) { try backend.schedule(.after(.seconds(1))) { _ in } }
    }

    /// The same failure, with end callbacks that shut the backend down on the loop's thread as
    /// they hear `.loopFailed`: they return, and so does the loop. (They waited for the shutdown
    /// their own thread was running.)
    @Test func endCallbacksOfALoopThatEndsOnItsOwnMayShutTheBackendDown() throws {
        let backend = try LibeventBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let fired = Counter()
        let told = Locked<[TimerEndReason]>([])
        try backend.schedule(.every(.milliseconds(1))) { _ in fired.increment() }
        let timer = try backend.schedule(.after(.seconds(60))) { _ in }
        timer.onEnd { reason in
            backend.shutdown()
            told.withLock { $0.append(reason) }
        }
        #expect(waitFor { fired.current >= 1 })
        event_base_loopbreak(backend.eventBase)
        #expect(waitFor { told.current.count == 1 }, "the end callback's shutdown() did not return")
        let cause = TimerError.nativeFailure(backend: "libevent", call: "event_base_loop (returned 0)")
        #expect(told.current == [.loopFailed(cause)])
    }

    @Test func repeatsStayOnTheGridAfterALateFire() throws {
        // libevent's own EV_PERSIST restarts its period from the late fire; the core does not.
        let backend = try LibeventBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let ticks = Locked<[Tick]>([])
        let done = DispatchSemaphore(value: 0)
        try backend.schedule(.every(.milliseconds(10), count: 6), missedTicks: .burst) { tick in
            ticks.withLock { $0.append(tick) }
            if tick.index == 1 { blockRealTime(.milliseconds(25)) }
            if tick.index == 5 { done.signal() }
        }
        #expect(done.wait(timeout: .now() + .seconds(10)) == .success)
        let scheduled = ticks.current.map(\.scheduled)
        for (k, deadline) in scheduled.enumerated() {
            #expect(deadline == scheduled[0] + .milliseconds(10) * k)
        }
    }
}

final class BurstProbe: Sendable {
    let fired = Counter()
    let firedWhenTheCallerRan = Locked<Int?>(nil)
}
