import CLibevent
import Dispatch
import Foundation
import NIOCore
import NIOPosix
import TimerKit
import TimerKitEpoll

/// One subject of a throughput run, operated on one timer at a time so that every subject's
/// batches can take turns: schedule timer `i` after `delays[i]`, reset it to a later deadline
/// (an idle timeout moved on a read), cancel it.
protocol ThroughputSubject: AnyObject {
    var name: String { get }
    func schedule(_ i: Int) throws
    func reset(_ i: Int) throws
    func cancel(_ i: Int) throws
    /// Frees what is left (every timer has been cancelled by then).
    func finish()
}

/// A TimerKit backend through its public API.
final class TimerKitSubject: ThroughputSubject {
    let name: String
    private let instance: any TimerBackend
    private let delays: [Duration]
    private var handles: [TimerHandle?]

    init(name: String, instance: any TimerBackend, delays: [Duration]) {
        self.name = name
        self.instance = instance
        self.delays = delays
        handles = Array(repeating: nil, count: delays.count)
    }

    func schedule(_ i: Int) throws { handles[i] = try instance.schedule(.after(delays[i])) { _ in } }
    func reset(_ i: Int) throws { try handles[i]?.reschedule(.after(delays[i] + resetPush)) }
    func cancel(_ i: Int) { handles[i]?.cancel() }
    func finish() {
        instance.shutdown()
        handles = []
    }
}

/// The epoll backend through keys (`TimerKey`, a `TimerCallback` shared by every timer): the path
/// for millions of timers, a subject of its own beside the handles and the baselines.
final class TimerKitKeySubject: ThroughputSubject {
    let name = "epoll-keys"
    private let instance: EpollBackend
    private let delays: [Duration]
    private var keys: [TimerKey?]
    private let callback = QuietCallback()

    private final class QuietCallback: TimerCallback {
        func timerFired(_ fire: TimerFire) {}
    }

    init(delays: [Duration]) throws {
        instance = try EpollBackend(registry: TimerRegistry())
        self.delays = delays
        keys = Array(repeating: nil, count: delays.count)
    }

    func schedule(_ i: Int) throws { keys[i] = try instance.schedule(.after(delays[i]), calling: callback) }
    func reset(_ i: Int) throws { if let key = keys[i] { try instance.reschedule(key, .after(delays[i] + resetPush)) } }
    func cancel(_ i: Int) { if let key = keys[i] { instance.cancel(key) } }
    func finish() {
        instance.shutdown()
        keys = []
    }
}

/// Throughput baselines with no TimerKit code: each native mechanism used the naive way,
/// one native timer per user timer, so a reader sees what the shared scheduler adds or saves.
struct RawBaseline: Sendable {
    let name: String
    /// The most timers it is run with (one Foundation Timer per timer cancels in O(n)).
    let maxTimers: Int
    let make: @Sendable (_ delays: [Duration]) throws -> any ThroughputSubject
}

let rawBaselines: [RawBaseline] = [
    // Not a baseline but TimerKit's own lean path: it joins the same runs, so it is listed here.
    RawBaseline(name: "epoll-keys", maxTimers: 50_000_000) { try TimerKitKeySubject(delays: $0) },
    RawBaseline(name: "libevent-raw", maxTimers: 10_000_000) { try LibeventRawSubject(delays: $0) },
    // NIO's cancel searches its task heap (and a reset is a cancel): a run at a million tasks
    // had not finished its resets and cancels after 12 minutes.
    RawBaseline(name: NIOPeer.name, maxTimers: 100_000) { NIORawSubject(delays: $0) },
    RawBaseline(name: "dispatch-raw", maxTimers: 1_000_000) { DispatchRawSubject(delays: $0) },
    RawBaseline(name: "foundation-raw", maxTimers: 20_000) { FoundationRawSubject(delays: $0) },
]

/// One libevent `event` per timer on a base nobody runs; `event_add` on a pending event moves
/// it: libevent's own reset.
final class LibeventRawSubject: ThroughputSubject {
    let name = "libevent-raw"
    private let base: OpaquePointer
    private let delays: [Duration]
    private var events: [OpaquePointer?]

    init(delays: [Duration]) throws {
        evthread_use_pthreads()
        guard let base = event_base_new() else { throw TimerError.nativeFailure(backend: "libevent", call: "event_base_new") }
        self.base = base
        self.delays = delays
        events = Array(repeating: nil, count: delays.count)
    }

    private func timeout(_ delay: Duration) -> timeval {
        let ns = delay.wholeNanoseconds
        return timeval(tv_sec: Int(ns / 1_000_000_000), tv_usec: Int(ns % 1_000_000_000 / 1000))
    }

    func schedule(_ i: Int) throws {
        var after = timeout(delays[i])
        guard let event = event_new(base, -1, 0, { _, _, _ in }, nil), event_add(event, &after) == 0 else {
            throw TimerError.nativeFailure(backend: "libevent", call: "event_new/event_add")
        }
        events[i] = event
    }

    func reset(_ i: Int) throws {
        var after = timeout(delays[i] + resetPush)
        guard let event = events[i], event_add(event, &after) == 0 else {
            throw TimerError.nativeFailure(backend: "libevent", call: "event_add")
        }
    }

    func cancel(_ i: Int) {
        guard let event = events[i] else { return }
        event_del(event)
        event_free(event)
        events[i] = nil
    }

    func finish() {
        for event in events { event.map { event_free($0) } }
        events = []
        event_base_free(base)
    }
}

/// NIO's `scheduleTask` per timer, from a thread other than the loop's, as a server's code on
/// another loop would. NIO has no reset: cancel and schedule again, as an idle-state handler does.
final class NIORawSubject: ThroughputSubject {
    let name = NIOPeer.name
    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    private let loop: any EventLoop
    private let delays: [Duration]
    private var tasks: [Scheduled<Void>?]

    init(delays: [Duration]) {
        loop = group.next()
        addNIOBackgroundTasks(to: loop)
        self.delays = delays
        tasks = Array(repeating: nil, count: delays.count)
    }

    func schedule(_ i: Int) { tasks[i] = loop.scheduleTask(in: .nanoseconds(delays[i].wholeNanoseconds)) {} }
    func reset(_ i: Int) {
        tasks[i]?.cancel()
        tasks[i] = loop.scheduleTask(in: .nanoseconds((delays[i] + resetPush).wholeNanoseconds)) {}
    }
    func cancel(_ i: Int) { tasks[i]?.cancel() }
    func finish() {
        tasks = []
        try? group.syncShutdownGracefully()
    }
}

/// A `DispatchSourceTimer` per timer on one serial queue; a reset is its `schedule` again.
final class DispatchRawSubject: ThroughputSubject {
    let name = "dispatch-raw"
    private let queue = DispatchQueue(label: "raw")
    private let delays: [Duration]
    private var sources: [DispatchSourceTimer?]

    init(delays: [Duration]) {
        self.delays = delays
        sources = Array(repeating: nil, count: delays.count)
    }

    func schedule(_ i: Int) {
        let source = DispatchSource.makeTimerSource(queue: queue)
        source.schedule(deadline: .now() + .nanoseconds(Int(delays[i].wholeNanoseconds)))
        source.setEventHandler {}
        source.activate()
        sources[i] = source
    }
    func reset(_ i: Int) { sources[i]?.schedule(deadline: .now() + .nanoseconds(Int((delays[i] + resetPush).wholeNanoseconds))) }
    func cancel(_ i: Int) { sources[i]?.cancel() }
    func finish() { sources = [] }
}

/// A Foundation `Timer` per timer on a run loop that is not running: add, move and
/// invalidate only.
final class FoundationRawSubject: ThroughputSubject {
    let name = "foundation-raw"
    private let loop = RunLoop.current
    private let delays: [Duration]
    private var timers: [Timer?]

    init(delays: [Duration]) {
        self.delays = delays
        timers = Array(repeating: nil, count: delays.count)
    }

    func schedule(_ i: Int) {
        let timer = Timer(fire: Date(timeIntervalSinceNow: Double(delays[i].wholeNanoseconds) / 1e9), interval: 0, repeats: false) { _ in }
        loop.add(timer, forMode: .default)
        timers[i] = timer
    }
    func reset(_ i: Int) { timers[i]?.fireDate = Date(timeIntervalSinceNow: Double((delays[i] + resetPush).wholeNanoseconds) / 1e9) }
    func cancel(_ i: Int) { timers[i]?.invalidate() }
    func finish() { timers = [] }
}
