import CLibevent
import Dispatch
import Foundation
import NIOCore
import TimerKit

/// Throughput baselines with no TimerKit code: each native mechanism used the naive way,
/// one native timer per user timer, so a reader sees what the shared scheduler adds or saves.
/// Each returns its batches of ns per schedule, reset (moving a waiting timer to a later
/// deadline, the native way) and cancel; memory is measured by the caller.
struct RawBaseline: Sendable {
    let name: String
    /// The most timers it is run with (one Foundation Timer per timer cancels in O(n)).
    let maxTimers: Int
    let run: @Sendable (_ delays: [Duration], _ order: RunOrder, _ batch: Int, _ atPeak: () -> Void) throws -> PhaseTimings
}

let rawBaselines: [RawBaseline] = [
    RawBaseline(name: "libevent-raw", maxTimers: 10_000_000) { delays, order, batch, atPeak in
        evthread_use_pthreads()
        guard let base = event_base_new() else { throw TimerError.nativeFailure(backend: "libevent", call: "event_base_new") }
        defer { event_base_free(base) }
        var events = [OpaquePointer?](repeating: nil, count: delays.count)
        func timeout(_ delay: Duration) -> timeval {
            let ns = delay.wholeNanoseconds
            return timeval(tv_sec: Int(ns / 1_000_000_000), tv_usec: Int(ns % 1_000_000_000 / 1000))
        }
        let schedule = try timeBatches(delays.count, batch) { i in
            var after = timeout(delays[i])
            guard let event = event_new(base, -1, 0, { _, _, _ in }, nil), event_add(event, &after) == 0 else {
                throw TimerError.nativeFailure(backend: "libevent", call: "event_new/event_add")
            }
            events[i] = event
        }
        atPeak()
        // event_add on a pending event moves it: libevent's own reset.
        let reset = try timeBatches(order.reset.count, batch) { i in
            let index = order.reset[i]
            var after = timeout(delays[index] + resetPush)
            guard let event = events[index], event_add(event, &after) == 0 else {
                throw TimerError.nativeFailure(backend: "libevent", call: "event_add")
            }
        }
        let cancel = try timeBatches(order.cancel.count, batch) { i in
            guard let event = events[order.cancel[i]] else { return }
            event_del(event)
            event_free(event)
        }
        return PhaseTimings(schedule: schedule, reset: reset, cancel: cancel)
    },
    RawBaseline(name: NIOPeer.name, maxTimers: 10_000_000) { delays, order, batch, atPeak in
        // From a thread other than the loop's, as a server's code on another loop would.
        try NIOPeer.withLoop { loop in
            var tasks: [Scheduled<Void>?] = Array(repeating: nil, count: delays.count)
            let schedule = try timeBatches(delays.count, batch) { i in
                tasks[i] = loop.scheduleTask(in: .nanoseconds(delays[i].wholeNanoseconds)) {}
            }
            atPeak()
            // NIO has no reset: cancel and schedule again, as an idle-state handler does.
            let reset = try timeBatches(order.reset.count, batch) { i in
                let index = order.reset[i]
                tasks[index]?.cancel()
                tasks[index] = loop.scheduleTask(in: .nanoseconds((delays[index] + resetPush).wholeNanoseconds)) {}
            }
            let cancel = try timeBatches(order.cancel.count, batch) { i in tasks[order.cancel[i]]?.cancel() }
            return PhaseTimings(schedule: schedule, reset: reset, cancel: cancel)
        }
    },
    RawBaseline(name: "dispatch-raw", maxTimers: 1_000_000) { delays, order, batch, atPeak in
        let queue = DispatchQueue(label: "raw")
        let sources = Locked<[DispatchSourceTimer?]>(Array(repeating: nil, count: delays.count))
        let schedule = try timeBatches(delays.count, batch) { i in
            let source = DispatchSource.makeTimerSource(queue: queue)
            source.schedule(deadline: .now() + .nanoseconds(Int(delays[i].wholeNanoseconds)))
            source.setEventHandler {}
            source.activate()
            sources.withLock { $0[i] = source }
        }
        atPeak()
        let reset = try timeBatches(order.reset.count, batch) { i in
            let index = order.reset[i]
            sources.withLock { $0[index] }?.schedule(deadline: .now() + .nanoseconds(Int((delays[index] + resetPush).wholeNanoseconds)))
        }
        let cancel = try timeBatches(order.cancel.count, batch) { i in
            sources.withLock { $0[order.cancel[i]] }?.cancel()
        }
        return PhaseTimings(schedule: schedule, reset: reset, cancel: cancel)
    },
    RawBaseline(name: "foundation-raw", maxTimers: 20_000) { delays, order, batch, atPeak in
        // On a run loop that is not running: this measures add and invalidate only.
        let loop = RunLoop.current
        var timers: [Timer?] = Array(repeating: nil, count: delays.count)
        let schedule = try timeBatches(delays.count, batch) { i in
            let timer = Timer(
                fire: Date(timeIntervalSinceNow: Double(delays[i].wholeNanoseconds) / 1e9),
                interval: 0, repeats: false
            ) { _ in }
            loop.add(timer, forMode: .default)
            timers[i] = timer
        }
        atPeak()
        let reset = try timeBatches(order.reset.count, batch) { i in
            let index = order.reset[i]
            timers[index]?.fireDate = Date(timeIntervalSinceNow: Double((delays[index] + resetPush).wholeNanoseconds) / 1e9)
        }
        let cancel = try timeBatches(order.cancel.count, batch) { i in timers[order.cancel[i]]?.invalidate() }
        return PhaseTimings(schedule: schedule, reset: reset, cancel: cancel)
    },
]

/// Runs `body(i)` for every i, timing each batch of `batch`: ns per operation per batch.
func timeBatches(_ count: Int, _ batch: Int, _ body: (Int) throws -> Void) throws -> [Double] {
    var batches: [Double] = []
    batches.reserveCapacity(count / batch + 1)
    var index = 0
    while index < count {
        let end = min(index + batch, count)
        let start = MonotonicInstant.now()
        for i in index..<end { try body(i) }
        batches.append(nanoseconds(since: start) / Double(end - index))
        index = end
    }
    return batches
}
