import Benchmark
import Dispatch
import Foundation
import Synchronization
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll

/// Counts handler calls and wakes the benchmark after a target number.
final class FireCounter: Sendable {
    let fires = Atomic<Int>(0)
    let target = Atomic<Int>(Int.max)
    let reached = DispatchSemaphore(value: 0)

    func fire(_ tick: Tick) {
        if fires.add(1, ordering: .relaxed).newValue == target.load(ordering: .relaxed) { reached.signal() }
    }

    /// Blocks until `count` more handler calls have happened.
    func wait(for count: Int) {
        target.store(fires.load(ordering: .relaxed) + count, ordering: .relaxed)
        reached.wait()
    }
}

/// A key path callback that does nothing: one object for every timer of a benchmark.
final class QuietCallback: TimerCallback {
    func timerFired(_ fire: TimerFire) {}
}

let benchmarks: @Sendable () -> Void = {
    let metrics: [BenchmarkMetric] = [.wallClock, .mallocCountTotal, .instructions]
    Benchmark.defaultConfiguration = .init(metrics: metrics, maxDuration: .seconds(3), maxIterations: 100_000)

    // Schedule then cancel one timer among 100,000 live ones (registry included).
    Benchmark("schedule+cancel, 100k live (epoll)", configuration: .init(metrics: metrics, scalingFactor: .kilo)) { benchmark in
        let backend = try EpollBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        // Live deadlines 1–60 s, new ones 30–89 s: a new timer is rarely the earliest, as with
        // most real timeouts (always being the earliest would re-arm the loop every time).
        let live = try (0..<100_000).map { i in try backend.schedule(.after(.milliseconds(1_000 + (i * 7_919) % 59_000))) { _ in } }
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations {
            let timer = try backend.schedule(.after(.seconds(30 + i % 60))) { _ in }
            timer.cancel()
        }
        benchmark.stopMeasurement()
        withExtendedLifetime(live) {}
    }

    // Reset one timer among 100,000 live ones to a later deadline: an idle timeout moved on a
    // read. Goal: no allocation (the queue entry stays where it is; nothing new is made).
    Benchmark("reset, 100k live (epoll)", configuration: .init(metrics: metrics, scalingFactor: .kilo)) { benchmark in
        let backend = try EpollBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        // Live deadlines 1–2 h; each reset moves one to 2 h from now, later than where it was.
        let live = try (0..<100_000).map { i in try backend.schedule(.after(.seconds(3_600 + (i * 7_919) % 3_600))) { _ in } }
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations { try live[i % live.count].reschedule(.after(.seconds(7_200))) }
        benchmark.stopMeasurement()
    }

    // The same two operations through keys: a callback object shared by every timer, no handle.
    // Goal: no allocation per schedule + cancel, nor per reset.
    Benchmark("schedule+cancel by key, 100k live (epoll)", configuration: .init(metrics: metrics, scalingFactor: .kilo)) {
        benchmark in
        let backend = try EpollBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let callback = QuietCallback()
        let live = try (0..<100_000).map { i in
            try backend.schedule(.after(.milliseconds(1_000 + (i * 7_919) % 59_000)), calling: callback)
        }
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations {
            backend.cancel(try backend.schedule(.after(.seconds(30 + i % 60)), calling: callback))
        }
        benchmark.stopMeasurement()
        withExtendedLifetime(live) {}
    }

    Benchmark("reset by key, 100k live (epoll)", configuration: .init(metrics: metrics, scalingFactor: .kilo)) { benchmark in
        let backend = try EpollBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let callback = QuietCallback()
        let live = try (0..<100_000).map { i in
            try backend.schedule(.after(.seconds(3_600 + (i * 7_919) % 3_600)), calling: callback)
        }
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations { try backend.reschedule(live[i % live.count], .after(.seconds(7_200))) }
        benchmark.stopMeasurement()
    }

    // A neighbour's shutdown must not stall a busy backend: backend A holds 1,000,000 timers
    // while another thread starts backend B on the same registry, schedules one timer on it and
    // shuts it down, over and over. Each sample is one schedule + cancel pair on A; its p99
    // and max show whether B's shutdown holds a lock A needs for a time that grows with A's timers.
    let fixture = NeighbourFixture()
    Benchmark(
        "schedule+cancel, 1M live, a neighbour starting and stopping (manual)",
        configuration: .init(
            metrics: [.wallClock], maxDuration: .seconds(3), maxIterations: 400_000,
            setup: { try fixture.start() }, teardown: { fixture.stop() })
    ) { benchmark in
        guard let backend = fixture.backend else { return }
        let timer = try backend.schedule(.after(.seconds(30))) { _ in }
        timer.cancel()
    }

    // A debounce called over and over in one burst: each call moves the one timer's deadline
    // later. Goal: no allocation per call after the burst's first (the work here captures
    // nothing, so the caller allocates nothing for it either).
    Benchmark("debounce by name, calls in one burst (manual)", configuration: .init(metrics: metrics, scalingFactor: .kilo)) {
        benchmark in
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        try clock.debounce("save", for: .milliseconds(300)) {}
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            try clock.debounce("save", for: .milliseconds(300)) {}
        }
        benchmark.stopMeasurement()
    }

    Benchmark("debouncer object, calls in one burst (manual)", configuration: .init(metrics: metrics, scalingFactor: .kilo)) {
        benchmark in
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let debouncer = try Debouncer(for: .milliseconds(300), on: clock)
        try debouncer.call {}
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations { try debouncer.call {} }
        benchmark.stopMeasurement()
    }

    // The fire path of a repeating timer, synchronously on virtual time: the core alone. (What
    // its statistics cost is measured by `statistics-cost`, in paired rounds: a p90 here moves
    // by more from run to run than the few ns they cost.)
    Benchmark("fire path, repeating timer (manual)", configuration: .init(metrics: metrics, scalingFactor: .kilo)) { benchmark in
        try manualFirePath(benchmark)
    }

    // The fire path on the epoll loop thread: the benchmark waits for N fires of a 100 µs
    // repeating timer. Goal: no allocation in steady state. Two sizes, so that a constant
    // (the measurement's own start and stop) can be told from a cost per fire.
    for fires in [1_000, 4_000] {
        Benchmark("fire path, \(fires) fires of a repeating timer (epoll)", configuration: .init(metrics: metrics, maxIterations: 30)) {
            benchmark in
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let counter = FireCounter()
            try backend.schedule(.every(.microseconds(100)), handler: counter.fire)
            counter.wait(for: 100)  // steady state
            benchmark.startMeasurement()
            counter.wait(for: fires)
            benchmark.stopMeasurement()
        }
    }

    // A `for await tick in backend.ticks(...)` loop on the loop's own executor: each tick is a
    // handler call, a hand-over to the waiting task and the task's turn on the loop. Goal: at
    // most one allocation per tick. Two sizes, as for the fire path above.
    for ticks in [1_000, 4_000] {
        Benchmark(
            "ticks loop, \(ticks) ticks of a 100 µs sequence (epoll, task on the loop)",
            configuration: .init(metrics: metrics, maxIterations: 30)
        ) {
            benchmark in
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let sequence = try backend.ticks(.every(.microseconds(100)))
            await withTaskExecutorPreference(backend.taskExecutor) {
                var received = 0
                for await _ in sequence {
                    received += 1
                    if received == 100 { benchmark.startMeasurement() }  // steady state
                    if received == 100 + ticks { break }
                }
                benchmark.stopMeasurement()
            }
        }
    }
}

/// Backend A with a million timers, and a thread that starts and stops backends beside it on
/// the same registry until stopped.
final class NeighbourFixture: @unchecked Sendable {
    // @unchecked: `backend` and `live` are written in `start` and cleared in `stop`, which the
    // benchmark runs before and after its measurement, never during it.
    var backend: ManualBackend?
    private var live: [TimerHandle] = []
    private let stopping = Atomic<Bool>(false)
    private let stopped = DispatchSemaphore(value: 0)

    func start() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        live = try (0..<1_000_000).map { i in try backend.schedule(.after(.milliseconds(1_000 + (i * 7_919) % 59_000))) { _ in } }
        self.backend = backend
        stopping.store(false, ordering: .relaxed)
        Thread.detachNewThread { [self] in
            while !stopping.load(ordering: .relaxed) {
                let neighbour = ManualBackend(registry: registry)
                _ = try? neighbour.schedule(.after(.seconds(1))) { _ in }
                neighbour.shutdown()
            }
            stopped.signal()
        }
    }

    func stop() {
        stopping.store(true, ordering: .relaxed)
        stopped.wait()
        backend?.shutdown()
        backend = nil
        live = []
    }
}

/// Fires a 100 µs repeating timer on virtual time, 1,000 times per iteration.
func manualFirePath(_ benchmark: Benchmark) throws {
    let clock = ManualBackend(registry: TimerRegistry())
    let counter = FireCounter()
    try clock.schedule(.every(.microseconds(100)), handler: counter.fire)
    clock.advance(by: .milliseconds(10))  // steady state
    benchmark.startMeasurement()
    for _ in benchmark.scaledIterations { clock.advance(by: .microseconds(100)) }
    benchmark.stopMeasurement()
    clock.shutdown()
}
