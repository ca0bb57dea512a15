import CLibevent
import CoreFoundation
import Dispatch
import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll
import TimerKitLibevent

/// Every backend configuration the conformance suite runs against. A new backend (or a new
/// way to attach one) joins by adding a case.
public enum BackendKind: String, CaseIterable, Codable, Sendable, CustomTestStringConvertible {
    case manual
    case dispatch
    /// A Dispatch backend whose queue targets a serial queue of the caller's.
    case dispatchOnCallerQueue
    case epoll
    case libevent
    case libeventAttached
    case runLoop
    case runLoopAttached
    /// The "Writing a backend" article's example, pumped by a loop of the caller's: the
    /// implementor surface alone meets the whole contract.
    case pumped
    #if TIMERKIT_NIO
        /// TimerKitNIO's backend on a SwiftNIO event loop. The TimerKitNIO package compiles this
        /// suite again with this configuration alone (its other backends run here already).
        case nio

        public static var allCases: [BackendKind] { [.nio] }
    #endif

    public var testDescription: String { rawValue }

    /// Whether the backend runs on real time (all but Manual).
    public var isRealTime: Bool { self != .manual }

    /// Makes the backend with a registry of its own; the harness's watchdog runs until
    /// `Harness.shutdown()`.
    public func makeHarness(watchdogSeconds: Double = 30) throws -> Harness {
        let watchdog = Watchdog(Test.current.map { "\($0.name) [\(rawValue)]" }, seconds: watchdogSeconds)
        let registry = TimerRegistry()
        switch self {
        case .manual:
            let clock = ManualBackend(registry: registry)
            return Harness(kind: self, backend: clock, manual: clock, watchdog: watchdog)
        case .dispatch:
            return Harness(kind: self, backend: DispatchBackend(registry: registry), watchdog: watchdog)
        case .dispatchOnCallerQueue:
            let queue = DispatchQueue(label: "caller")
            return Harness(
                kind: self, backend: DispatchBackend(queue: queue, registry: registry), watchdog: watchdog,
                onCallerContext: { queue.async(execute: $0) })
        case .epoll:
            return Harness(kind: self, backend: try EpollBackend(registry: registry), watchdog: watchdog)
        case .libevent:
            return Harness(kind: self, backend: try LibeventBackend(registry: registry), watchdog: watchdog)
        case .libeventAttached:
            let loop = try CallerLibeventLoop()
            return Harness(
                kind: self, backend: try LibeventBackend(attachedTo: loop.base, registry: registry), watchdog: watchdog,
                onCallerContext: loop.perform, teardown: loop.stop)
        case .runLoop:
            return Harness(kind: self, backend: try RunLoopBackend(registry: registry), watchdog: watchdog)
        case .runLoopAttached:
            let loop = try CallerRunLoop(registry: registry)
            return Harness(kind: self, backend: loop.backend, watchdog: watchdog, onCallerContext: loop.perform, teardown: loop.stop)
        case .pumped:
            let backend = PumpedBackend(registry: registry)
            let loop = try CallerPumpLoop(backend)
            return Harness(kind: self, backend: backend, watchdog: watchdog, onCallerContext: loop.perform, teardown: loop.stop)
        #if TIMERKIT_NIO
            case .nio:
                return makeNIOHarness(registry: registry, watchdog: watchdog)
        #endif
        }
    }
}

/// Lets the same test body run on virtual and real time.
public final class Harness: Sendable {
    public let kind: BackendKind
    public let backend: any TimerBackend
    public let manual: ManualBackend?
    private let watchdog: Watchdog
    private let callerContext: @Sendable (@escaping @Sendable () -> Void) -> Void
    private let teardown: @Sendable () -> Void
    private let ownExecutor = ThreadTaskExecutor()

    init(
        kind: BackendKind, backend: any TimerBackend, manual: ManualBackend? = nil, watchdog: Watchdog,
        onCallerContext: (@Sendable (@escaping @Sendable () -> Void) -> Void)? = nil,
        teardown: @escaping @Sendable () -> Void = {}
    ) {
        self.kind = kind
        self.backend = backend
        self.manual = manual
        self.watchdog = watchdog
        self.callerContext = onCallerContext ?? { onBackgroundThread($0) }
        self.teardown = teardown
    }

    public var registry: TimerRegistry { backend.registry }

    /// Where a test runs the tasks of the code under test: Manual's test executor (so that
    /// `advance` and `settle` see them), or a thread of the harness's own on real backends.
    public var taskExecutor: any TaskExecutor { manual?.taskExecutor ?? ownExecutor }

    /// Lets `duration` of backend time pass: virtual time advances, real time is waited out.
    public func pass(_ duration: Duration) {
        if let manual { manual.advance(by: duration) } else { blockRealTime(duration) }
    }

    /// Called from inside a handler: the handler "takes" `duration`.
    public func work(_ duration: Duration) {
        if let manual { manual.advance(by: duration) } else { blockRealTime(duration) }
    }

    /// Waits until `condition` holds, advancing virtual time in 1 ms steps or polling real
    /// time, for at most `timeout` (generous: this VM is noisy).
    @discardableResult
    public func waitUntil(_ timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
        guard manual != nil else { return waitFor(timeout, condition) }
        var waited = Duration.zero
        while !condition() {
            if waited >= timeout { return false }
            pass(.milliseconds(1))
            waited += .milliseconds(1)
        }
        return true
    }

    /// `waitUntil` for async tests: on real time it polls without holding a thread of the
    /// cooperative pool (which has one per core: tests that block it starve every async test).
    public func waitUntilAsync(_ timeout: Duration = .seconds(10), _ condition: @Sendable () -> Bool) async -> Bool {
        guard manual != nil else { return await waitForAsync(timeout, condition) }
        return waitUntil(timeout, condition)  // virtual time: each step is quick
    }

    /// `pass` for async tests: real time is slept, not blocked.
    public func passAsync(_ duration: Duration) async {
        if let manual { manual.advance(by: duration) } else { try? await Task.sleep(for: duration) }
    }

    /// Runs `body` off the test's thread; on Manual it also drives virtual time there, so a
    /// handler can block while the test thread acts on its timer.
    public func driveInBackground(for duration: Duration, _ body: @escaping @Sendable () -> Void = {}) {
        onBackgroundThread { [manual] in
            body()
            manual?.advance(by: duration)
        }
    }

    /// Runs `operation` as code under test and returns its result. On real backends it simply
    /// runs; on Manual it runs as a task on the backend's task executor while virtual time
    /// advances 1 ms at a time (each step settling the task), up to `timeout` of virtual time.
    public func drive<T: Sendable>(
        _ timeout: Duration = .seconds(10), _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        guard let manual else { return try await operation() }
        let done = Locked(false)
        let task = Task(executorPreference: manual.taskExecutor) {
            defer { done.withLock { $0 = true } }
            return try await operation()
        }
        await manual.settle()
        var waited = Duration.zero
        while !done.current && waited < timeout {
            await manual.advanceAndSettle(by: .milliseconds(1))
            waited += .milliseconds(1)
        }
        if !done.current { task.cancel() }
        return try await task.value
    }

    /// Runs `body` where the code that owns the backend runs: a block on the caller's queue
    /// (Dispatch on a caller's queue), a callback of the caller's loop (attached libevent and
    /// RunLoop), or a thread of its own (backends with a loop of their own, and Manual).
    public func onCallerContext(_ body: @escaping @Sendable () -> Void) { callerContext(body) }

    /// Shuts the backend down, then the caller's loop, then disarms the watchdog.
    public func shutdown() {
        backend.shutdown()
        teardown()
        ownExecutor.stop()
        watchdog.disarm()
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

    private struct Refs: @unchecked Sendable {
        // @unchecked: thread-safe CF objects, handed over once at start-up.
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
