import CoreFoundation
import Dispatch
import Foundation
@testable import TimerKit
import TimerKitEpoll
import TimerKitLibevent
import CLibevent

/// Every backend the conformance suite runs against. A new backend joins by adding a case.
enum BackendKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case manual
    case dispatch
    case epoll
    case libevent
    case libeventAttached
    case runLoop
    case runLoopAttached

    var testDescription: String { rawValue }

    func makeHarness() throws -> Harness {
        let registry = TimerRegistry()
        switch self {
        case .manual:
            let clock = ManualBackend(registry: registry)
            return Harness(backend: clock, manual: clock)
        case .dispatch:
            return Harness(backend: DispatchBackend(registry: registry))
        case .epoll:
            return Harness(backend: try EpollBackend(registry: registry))
        case .libevent:
            return Harness(backend: try LibeventBackend(registry: registry))
        case .runLoop:
            return Harness(backend: try RunLoopBackend(registry: registry))
        case .runLoopAttached:
            let loop = try CallerRunLoop(registry: registry)
            return Harness(backend: loop.backend) { loop.stop() }
        case .libeventAttached:
            let loop = try CallerLibeventLoop()
            return Harness(backend: try LibeventBackend(attachedTo: loop.base, registry: registry)) { loop.stop() }
        }
    }
}

import Testing

/// Lets the same test body run on virtual and real time.
final class Harness: Sendable {
    let backend: any TimerBackend
    let manual: ManualBackend?
    private let teardown: @Sendable () -> Void

    init(backend: any TimerBackend, manual: ManualBackend? = nil, teardown: @escaping @Sendable () -> Void = {}) {
        self.backend = backend
        self.manual = manual
        self.teardown = teardown
    }

    var registry: TimerRegistry { backend.registry }

    /// Lets `duration` of backend time pass: virtual time advances, real time is waited out.
    func pass(_ duration: Duration) {
        if let manual { manual.advance(by: duration) } else { blockRealTime(duration) }
    }

    /// Called from inside a handler: the handler "takes" `duration`.
    func work(_ duration: Duration) {
        if let manual { manual.advance(by: duration) } else { blockRealTime(duration) }
    }

    /// Waits until `condition` holds, advancing virtual time in 1 ms steps or polling real
    /// time, for at most `timeout` (generous: this VM is noisy).
    @discardableResult
    func waitUntil(_ timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
        var waited = Duration.zero
        while !condition() {
            if waited >= timeout { return false }
            pass(.milliseconds(1))
            waited += .milliseconds(1)
        }
        return true
    }

    /// Runs `body` off the test's thread; on Manual it also drives virtual time there, so a
    /// handler can block while the test thread acts on its timer.
    func driveInBackground(for duration: Duration, _ body: @escaping @Sendable () -> Void = {}) {
        DispatchQueue.global().async { [manual] in
            body()
            manual?.advance(by: duration)
        }
    }

    func shutdown() {
        backend.shutdown()
        teardown()
    }
}

/// Blocks the calling thread for `duration` of real time (a busy handler, or a pause in a
/// real-time test whose bounds are generous).
func blockRealTime(_ duration: Duration) {
    _ = DispatchSemaphore(value: 0).wait(timeout: .now() + .nanoseconds(Int(duration.components.seconds) * 1_000_000_000 + Int(duration.components.attoseconds / 1_000_000_000)))
}

/// Records ticks from handlers that run on other threads.
final class TickLog: Sendable {
    private let ticks = Locked<[Tick]>([])
    func record(_ tick: Tick) { ticks.withLock { $0.append(tick) } }
    var all: [Tick] { ticks.current }
    var count: Int { ticks.current.count }
}

func ms(_ value: Int) -> Duration { .milliseconds(value) }

/// A libevent loop run by "the caller" (this test), as a C program would run its own.
final class CallerLibeventLoop: @unchecked Sendable {
    // @unchecked: `base` is made before the thread starts and freed after it is joined.
    let base: OpaquePointer
    private let thread: LoopThread
    private let stopEvent: OpaquePointer

    init() throws {
        evthread_use_pthreads()   // before the base, as LibeventBackend's docs require
        let config = event_config_new()
        event_config_set_flag(config, Int32(EVENT_BASE_FLAG_PRECISE_TIMER.rawValue))
        guard let base = event_base_new_with_config(config) else { throw TimerError.nativeFailure(backend: "test", call: "event_base_new") }
        event_config_free(config)
        self.base = base
        // A loopbreak sent before the loop starts is lost; an activated event is not.
        guard let stopEvent = event_new(base, -1, 0, { _, _, argument in
            if let base = OpaquePointer(argument) { event_base_loopbreak(base) }
        }, UnsafeMutableRawPointer(base)) else { throw TimerError.nativeFailure(backend: "test", call: "event_new") }
        self.stopEvent = stopEvent
        let address = UInt(bitPattern: base)
        thread = try LoopThread {
            guard let base = OpaquePointer(bitPattern: address) else { return }
            event_base_loop(base, Int32(EVLOOP_NO_EXIT_ON_EMPTY))
        }
    }

    func stop() {
        event_active(stopEvent, 0, 0)
        thread.join()
        event_free(stopEvent)
        event_base_free(base)   // runs the finalizer of the backend's event
    }
}

/// A run loop run by "the caller" (this test) on a thread of its own, with a backend
/// attached to it from that thread.
final class CallerRunLoop: @unchecked Sendable {
    // @unchecked: `backend` and `cfRunLoop` are set before init returns and then only read;
    // CFRunLoopStop is thread-safe.
    private(set) var backend: RunLoopBackend
    private let cfRunLoop: CFRunLoop
    private let thread: LoopThread
    private let stopped = Locked(false)

    private struct Refs: @unchecked Sendable {
        let backend: RunLoopBackend
        let cfRunLoop: CFRunLoop
    }

    init(registry: TimerRegistry) throws {
        let started = StartSignal<Refs>()
        let stopped = self.stopped
        thread = try LoopThread {
            started.send(Refs(backend: RunLoopBackend(attachedTo: .current, registry: registry), cfRunLoop: CFRunLoopGetCurrent()))
            while !stopped.current { _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.05)) }
        }
        guard let refs = started.receive() else { throw TimerError.nativeFailure(backend: "test", call: "run loop thread") }
        backend = refs.backend
        cfRunLoop = refs.cfRunLoop
    }

    func stop() {
        stopped.withLock { $0 = true }
        CFRunLoopStop(cfRunLoop)
        thread.join()
    }
}
