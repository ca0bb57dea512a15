import CLibevent
import CoreFoundation
import Dispatch
import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
@_exported import TimerKitConformance
import TimerKitEpoll
import TimerKitLibevent
import TimerKitURing

/// TimerKit's own backend configurations, which its conformance suite runs every check on.
/// A new backend (or a new way to attach one) joins by adding a case.
public enum BackendKind: String, CaseIterable, Codable, Sendable, CustomTestStringConvertible {
    case manual
    case dispatch
    /// A Dispatch backend whose queue targets a serial queue of the caller's.
    case dispatchOnCallerQueue
    case epoll
    /// The epoll backend waiting in `epoll_pwait2`, with no timerfd.
    case epollPwait2
    case libevent
    case libeventAttached
    case runLoop
    case runLoopAttached
    /// The "Writing a backend" article's example, pumped by a loop of the caller's: the
    /// implementor surface alone meets the whole contract.
    case pumped
    /// The io_uring backend.
    case uring

    public var testDescription: String { rawValue }

    /// Whether the backend runs on real time (all but Manual).
    public var isRealTime: Bool { self != .manual }

    /// The configuration the checks run on.
    public var underTest: BackendUnderTest {
        switch self {
        case .manual: .manual
        case .dispatch: .dispatch
        case .dispatchOnCallerQueue:
            BackendUnderTest(rawValue) { registry in
                let queue = DispatchQueue(label: "caller")
                return .init(DispatchBackend(queue: queue, registry: registry), callerContext: { queue.async(execute: $0) })
            }
        case .epoll: .epoll
        case .epollPwait2: BackendUnderTest(rawValue) { .init(try EpollBackend(options: .init(waitMode: .epollPwait2), registry: $0)) }
        case .libevent: BackendUnderTest(rawValue) { .init(try LibeventBackend(registry: $0)) }
        case .libeventAttached:
            BackendUnderTest(rawValue) { registry in
                let loop = try CallerLibeventLoop()
                return .init(
                    try LibeventBackend(attachedTo: loop.base, registry: registry), callerContext: loop.perform, teardown: loop.stop)
            }
        case .runLoop: BackendUnderTest(rawValue) { .init(try RunLoopBackend(registry: $0)) }
        case .runLoopAttached:
            BackendUnderTest(rawValue) { registry in
                let loop = try CallerRunLoop(registry: registry)
                return .init(loop.backend, callerContext: loop.perform, teardown: loop.stop)
            }
        case .pumped:
            BackendUnderTest(rawValue) { registry in
                let backend = PumpedBackend(registry: registry)
                let loop = try CallerPumpLoop(backend)
                return .init(backend, callerContext: loop.perform, teardown: loop.stop)
            }
        case .uring: BackendUnderTest(rawValue) { .init(try IOURingBackend(registry: $0)) }
        }
    }

    /// A backend of a configuration with a loop of its own (epoll, epollPwait2, uring), made
    /// directly, with nothing else holding it: for tests that drop it.
    public func makeOwnLoopBackend(_ registry: TimerRegistry) throws -> any TimerBackend {
        switch self {
        case .epollPwait2: try EpollBackend(options: .init(waitMode: .epollPwait2), registry: registry)
        case .uring: try IOURingBackend(registry: registry)
        default: try EpollBackend(registry: registry)
        }
    }

    /// Why this configuration cannot run on this machine (io_uring disabled, a kernel without
    /// `epoll_pwait2`), or nil. With `TIMERKIT_TEST_IO_URING=unavailable` in the environment the
    /// io_uring backend's set-up fails as on a kernel without io_uring (ENOSYS), so that a
    /// machine where it works runs the path of one where it does not.
    public var unavailableReason: String? {
        switch self {
        case .uring: BackendKind.uringUnavailableReason
        case .epollPwait2: EpollBackend.pwait2Unavailability
        default: nil
        }
    }

    private static let uringUnavailableReason: String? = {
        if ProcessInfo.processInfo.environment["TIMERKIT_TEST_IO_URING"] == "unavailable" {
            IOURingBackend.simulatedSetupErrno.store(ENOSYS, ordering: .relaxed)
        }
        return IOURingBackend.unavailableReason
    }()

    /// On a configuration that cannot run here, checks what it does instead: making it throws
    /// `TimerError.unavailable` with the reason, and leaves no descriptor or thread behind; then
    /// records a warning that says `what` was not run, and returns true. False when it can run.
    public func checkedUnavailable(_ what: String) throws -> Bool {
        guard let reason = unavailableReason else { return false }
        do {
            try makeHarness().shutdown()
            Issue.record("\(rawValue) is unavailable (\(reason)) but was made all the same")
        } catch let error as TimerError {
            #expect(error == .unavailable(backend: rawValue == "uring" ? "io_uring" : "epoll", reason: reason))
        }
        Issue.record("\(what) not run on \(rawValue): \(reason); checked its typed error instead", severity: .warning)
        return true
    }

    /// Makes the backend with a registry of its own; the harness's watchdog runs until
    /// `Harness.shutdown()`.
    package func makeHarness(watchdogSeconds: Double = 90) throws -> Harness {
        try underTest.makeHarness(watchdogSeconds: watchdogSeconds)
    }
}

/// A libevent loop run by "the caller" (this test), as a C program would run its own.
final class CallerLibeventLoop: @unchecked Sendable {
    // @unchecked: `base` and `stopEvent` are made before the thread starts and freed after
    // it is joined; libevent's own lock (evthread) guards them in between.
    let base: OpaquePointer
    private let stopEvent: OpaquePointer
    private let loop: OwnedLoop

    private final class Work {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    init() throws {
        evthread_use_pthreads()  // before the base, as LibeventBackend's docs require
        let config = event_config_new()
        event_config_set_flag(config, Int32(EVENT_BASE_FLAG_PRECISE_TIMER.rawValue))
        guard let base = event_base_new_with_config(config) else { throw TimerError.nativeFailure(backend: "test", call: "event_base_new") }
        event_config_free(config)
        self.base = base
        // A loopbreak sent before the loop starts is lost; an activated event is not.
        guard
            let stopEvent = event_new(
                base, -1, 0,
                { _, _, argument in
                    if let base = OpaquePointer(argument) { event_base_loopbreak(base) }
                }, UnsafeMutableRawPointer(base))
        else { throw TimerError.nativeFailure(backend: "test", call: "event_new") }
        self.stopEvent = stopEvent
        let (baseAddress, stopAddress) = (UInt(bitPattern: base), UInt(bitPattern: stopEvent))
        loop = try OwnedLoop(
            { _ in
                guard let base = OpaquePointer(bitPattern: baseAddress) else { return }
                event_base_loop(base, Int32(EVLOOP_NO_EXIT_ON_EMPTY))
            },
            release: {
                guard let base = OpaquePointer(bitPattern: baseAddress), let stopEvent = OpaquePointer(bitPattern: stopAddress) else {
                    return
                }
                event_free(stopEvent)
                event_base_free(base)  // runs the finalizer of the backend's event
            })
    }

    /// Runs `body` in a callback of this loop.
    func perform(_ body: @escaping @Sendable () -> Void) {
        var now = timeval()
        let work = Unmanaged.passRetained(Work(body))
        event_base_once(
            base, -1, Int16(EV_TIMEOUT),
            { _, _, argument in
                guard let argument else { return }
                Unmanaged<Work>.fromOpaque(argument).takeRetainedValue().body()
            }, work.toOpaque(), &now)
    }

    func stop() {
        let stopEvent = self.stopEvent
        loop.stop { event_active(stopEvent, 0, 0) }
    }
}

/// A run loop run by "the caller" (this test) on a thread of its own, with a backend
/// attached to it from that thread.
final class CallerRunLoop: @unchecked Sendable {
    // @unchecked: the fields are set before init returns and then only read; RunLoop's
    // `perform` and CFRunLoopStop are thread-safe.
    let backend: RunLoopBackend
    private let runLoop: RunLoop
    private let cfRunLoop: CFRunLoop
    private let loop: OwnedLoop

    // @unchecked: thread-safe CF objects, handed over once at start-up.
    private struct Refs: @unchecked Sendable {
        let backend: RunLoopBackend
        let runLoop: RunLoop
        let cfRunLoop: CFRunLoop
    }

    init(registry: TimerRegistry) throws {
        let started = StartSignal<Refs>()
        loop = try OwnedLoop(
            { loop in
                started.send(
                    Refs(
                        backend: RunLoopBackend(attachedTo: .current, registry: registry), runLoop: .current,
                        cfRunLoop: CFRunLoopGetCurrent()))
                while !loop.isStopping { _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.05)) }
            }, release: {})
        guard let refs = started.receive() else { throw TimerError.nativeFailure(backend: "test", call: "run loop thread") }
        backend = refs.backend
        runLoop = refs.runLoop
        cfRunLoop = refs.cfRunLoop
    }

    /// Runs `body` on the loop's thread (within 50 ms: `perform` does not wake the loop).
    func perform(_ body: @escaping @Sendable () -> Void) {
        runLoop.perform(body)
    }

    func stop() {
        let cfRunLoop = self.cfRunLoop
        loop.stop { CFRunLoopStop(cfRunLoop) }
    }
}

/// The loop of a program that uses `PumpedBackend`: each turn it runs the work queued for it,
/// then the timers that are due, then sleeps until the next deadline (1 ms at the most, so
/// that an earlier deadline or new work is seen soon).
final class CallerPumpLoop: Sendable {
    private let backend: PumpedBackend
    private let work = Locked<[@Sendable () -> Void]>([])
    private let loop: OwnedLoop

    init(_ backend: PumpedBackend) throws {
        self.backend = backend
        let work = self.work
        loop = try OwnedLoop(
            { loop in
                while !loop.isStopping {
                    for item in work.withLock({ $0.take() }) { item() }
                    backend.runDueTimers()
                    let now = MonotonicInstant.now()
                    let next = backend.nextDeadline
                    blockRealTime(next > now ? min(next - now, .milliseconds(1)) : .zero)
                }
            }, release: {})
    }

    /// Runs `body` on the loop's thread, at its next turn.
    func perform(_ body: @escaping @Sendable () -> Void) { work.withLock { $0.append(body) } }

    func stop() { loop.stop {} }
}

extension Array {
    /// Empties the array and returns what it held.
    mutating func take() -> [Element] {
        defer { self = [] }
        return self
    }
}

/// What a 1 µs repeating timer costs the loop of `backend`, which counts into `counts`: its
/// fires, and the waits and re-arms the loop made meanwhile. It is due again every time the
/// loop would sleep, so a loop that fires what has come without waiting makes few of either.
package func dueTimerLoopCost(_ backend: any TimerBackend, counts: LoopCounts) throws -> (fires: Int, waits: Int, rearms: Int) {
    let before = (counts.waits, counts.rearms)
    let fired = Counter()
    let timer = try backend.schedule(.every(.microseconds(1))) { _ in fired.increment() }
    #expect(waitFor { fired.current >= 1000 }, "the timer fired \(fired.current) times")
    timer.cancel()
    return (fired.current, counts.waits - before.0, counts.rearms - before.1)
}
