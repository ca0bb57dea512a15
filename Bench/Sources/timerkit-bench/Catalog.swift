import TimerKit
import TimerKitEpoll
import TimerKitLibevent
import TimerKitNIO
import TimerKitURing

/// A subject the bench can measure: a TimerKit backend, or a baseline with no TimerKit code.
struct BenchBackend: Sendable {
    let name: String
    /// Makes a backend; nil for baselines, which run their own latency loop instead.
    let make: (@Sendable (TimerRegistry) throws -> any TimerBackend)?
    /// A baseline's own latency loop: (interval, seconds, recorder).
    let baselineLatency: (@Sendable (Duration, Double, LatencyRecorder) throws -> Void)?
    /// A baseline's own first-fire loop: (samples, recorder).
    var baselineFirstFire: (@Sendable (Int, LatencyRecorder) throws -> Void)? = nil
    /// Virtual-time backends have no real latency.
    let realTime: Bool

    var scenarios: [Scenario] {
        var list: [Scenario] = []
        if realTime { list.append(.latency) }
        if baselineFirstFire != nil { list.append(.firstFire) }
        if realTime && make != nil { list += [.fanout, .async] }
        if make != nil { list += [.throughput, .stalls] }
        return list
    }

    /// The same subject under another name (`--self-check`).
    func relabelled(_ name: String) -> BenchBackend {
        BenchBackend(name: name, make: make, baselineLatency: baselineLatency, baselineFirstFire: baselineFirstFire, realTime: realTime)
    }

    static func backend(_ name: String, realTime: Bool = true, _ make: @escaping @Sendable (TimerRegistry) throws -> any TimerBackend)
        -> BenchBackend
    {
        BenchBackend(name: name, make: make, baselineLatency: nil, realTime: realTime)
    }

    static func baseline(
        _ name: String, firstFire: (@Sendable (Int, LatencyRecorder) throws -> Void)? = nil,
        _ latency: @escaping @Sendable (Duration, Double, LatencyRecorder) throws -> Void
    ) -> BenchBackend {
        BenchBackend(name: name, make: nil, baselineLatency: latency, baselineFirstFire: firstFire, realTime: true)
    }
}

/// Everything the bench compares, in report order. A new backend joins by adding itself here,
/// under its `TimerBackend.name` (or that name, a hyphen and its mode: `epoll-pwait2`).
/// A backend this machine cannot run (io_uring disabled, a kernel without `epoll_pwait2`) is
/// left out, and `unavailableBackends` says why.
let allBackends: [BenchBackend] = knownBackends.filter { unavailableBackends[$0.name] == nil }

/// Backends the bench knows but this machine cannot run, with the reason.
let unavailableBackends: [String: String] = {
    var reasons: [String: String] = [:]
    if let reason = IOURingBackend.unavailableReason { reasons["io_uring"] = reason }
    if !EpollBackend.supportsEpollPwait2 {
        reasons["epoll-pwait2"] = "epoll_pwait2 needs Linux 5.11 or later"
        reasons["pwait2-raw"] = reasons["epoll-pwait2"]
    }
    if IOURingBackend.unavailableReason != nil { reasons["io_uring-raw"] = reasons["io_uring"] }
    return reasons
}()

let knownBackends: [BenchBackend] = [
    .baseline("floor", runTimerfdFloor),
    .backend("epoll") { try EpollBackend(registry: $0) },
    // The epoll backend with no timerfd: the wait's own timeout (Linux 5.11 and later).
    .backend("epoll-pwait2") { try EpollBackend(options: .init(waitMode: .epollPwait2), registry: $0) },
    .backend("io_uring") { try IOURingBackend(registry: $0) },
    .backend("libevent") { try LibeventBackend(registry: $0) },
    .backend("dispatch") { DispatchBackend(registry: $0) },
    .backend("runloop") { try RunLoopBackend(registry: $0) },
    // TimerKit on a SwiftNIO loop of the bench's own (one thread, kept for the whole run).
    .backend("nio") { NIOBackend(on: benchEventLoopGroup.next(), registry: $0) },
    .backend("manual", realTime: false) { ManualBackend(registry: $0) },
    // SwiftNIO's own timers, no TimerKit: a peer, not a backend (also in throughput and fan-out).
    .baseline(NIOPeer.name, firstFire: NIOPeer.firstFire, NIOPeer.latency),
]

/// The label `--self-check` gives the second measurement of a backend.
let selfCheckSuffix = "#2"
