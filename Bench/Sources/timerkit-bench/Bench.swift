import ArgumentParser
import Foundation
import TimerKit

enum Scenario: String, ExpressibleByArgument, CaseIterable {
    case latency
    case firstFire = "first-fire"
    case drift
    case throughput
    case stalls
    case fanout
    case idle
    case display
    case async
}

struct DurationArgument: ExpressibleByArgument {
    let duration: Duration
    init?(argument: String) {
        guard let duration = parseDuration(argument) else { return nil }
        self.duration = duration
    }
    var defaultValueDescription: String { "1ms" }
}

struct LoadArgument: ExpressibleByArgument {
    let load: Load
    init?(argument: String) {
        guard let load = Load(rawValue: argument) else { return nil }
        self.load = load
    }
    var defaultValueDescription: String { "none" }
    static var allValueStrings: [String] { Load.allCases.map(\.rawValue) }
}

@main
struct TimerKitBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "timerkit-bench",
        abstract: "Runs the same timer work on every TimerKit backend and compares them, or compares two saved runs.",
        subcommands: [RunBench.self, CompareRuns.self, RenderMarkdown.self], defaultSubcommand: RunBench.self)
}

struct RunBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Runs the same timer work on every TimerKit backend and compares them (the default command).",
        discussion: """
            Scenarios: latency (lateness of a repeating timer, optionally under --load), first-fire \
            (a fresh one-shot), drift (first vs last tenth of a long run), throughput (schedule, reset and \
            cancel N timers, deadlines 1–2 h, against raw native timers), stalls (the longest single schedule, \
            reset and cancel among N timers, which bounds how long each holds the lock), fanout (10,000 \
            repeating timers), idle (wake-ups with nothing due), display (DisplayLink at 60/120 Hz), async (a task awaiting each backend's clock and a ticks \
            loop, against its callbacks, Task.sleep and AsyncTimerSequence). \
            With no scenario, runs them all. Compare backends inside one run: p50 repeats between \
            runs, p99 does not on a noisy machine.
            """)

    @Argument(help: "Scenarios to run: \(Scenario.allCases.map(\.rawValue).joined(separator: ", ")). Default: all.")
    var scenarios: [Scenario] = []

    @Option(
        name: .customLong("backend"),
        help: "A backend to include (repeatable). Default: every backend. Known: \(allBackends.map(\.name).joined(separator: ", ")).")
    var backendNames: [String] = []

    @Option(
        help:
            "Timers for the throughput and stalls scenarios, repeatable (default: 1000, 10000 and 100000 in turn; add --timers 1000000 for a million)."
    )
    var timers: [Int] = []

    @Option(help: "Interval of the latency probe, e.g. 1ms, 250us.")
    var interval: DurationArgument = DurationArgument(argument: "1ms")!

    @Option(help: "Seconds of latency measurement per backend (and display; async gives each of its 28 subjects 40 % of it).")
    var seconds: Double = 5

    /// The share of `--seconds` each async subject gets: it has four per backend and peers,
    /// which would otherwise take most of the run.
    private static let asyncShare = 0.4

    @Option(help: "Seconds of the drift scenario (all backends at once).")
    var driftSeconds: Double = 15

    @Option(
        help: "Load during latency: none, busy-loop (0.8 ms of work every 1 ms on each backend's loop), cpu (a spinning thread per core).")
    var load: LoadArgument = LoadArgument(argument: "none")!

    @Option(help: "Tolerance of each fan-out timer, e.g. 1ms (default 0: every timer wakes the loop on its own).")
    var tolerance: String = "0"

    @Option(help: "Jitter of each fan-out timer, e.g. 20ms (default 0).")
    var jitter: String = "0"

    @Flag(help: "Fan-out timers all on one phase, as clients started together, instead of random phases.")
    var herd = false

    @Option(
        help: "NIO tasks an hour away to keep on every NIO loop measured (nio and nio-raw), as a server's connections keep theirs.")
    var nioBackgroundTasks = 0

    @Flag(
        help: """
            Leave out the raw native baselines (libevent-raw, timerfd-raw, pwait2-raw, io_uring-raw, dispatch-raw, foundation-raw) \
            in throughput and fan-out.
            """
    )
    var noRaw = false

    @Option(help: "Also write a self-contained HTML report with charts to this file.")
    var html: String?

    @Flag(help: "Print one JSON object instead of the table.")
    var json = false

    @Option(
        name: .customLong("repeat"),
        help:
            "Rounds of every comparing scenario (latency, first-fire, fanout, idle, display, async): each round gives every backend one slice, in a rotated order, and each figure's 95 % interval comes from its slices (default 10; 3 with --quick)."
    )
    var rounds: Int?

    @Flag(help: "A smoke run of a few seconds: short latency slices, 10,000 timers.")
    var quick = false

    @Flag(
        help:
            "Latency also measures the first backend again under a second label (NAME#2) and says whether the two differ beyond the noise: a check of the intervals, which should find no difference."
    )
    var selfCheck = false

    @Flag(help: "Print the backend names, one a line, and exit.")
    var listBackends = false

    func validate() throws {
        let known = Set(allBackends.map(\.name))
        for name in backendNames where !known.contains(name) {
            if let reason = unavailableBackends[name] { throw ValidationError("backend '\(name)' cannot run on this machine: \(reason)") }
            throw ValidationError("unknown backend '\(name)'; known: \(allBackends.map(\.name).joined(separator: ", "))")
        }
        for count in timers where !(1...50_000_000).contains(count) {
            throw ValidationError("--timers must be in 1...50000000 (got \(count))")
        }
        guard driftSeconds.isFinite && driftSeconds >= 1 && driftSeconds <= 86_400 else {
            throw ValidationError("--drift-seconds must be in 1...86400 (got \(driftSeconds))")
        }
        guard seconds.isFinite && seconds > 0 && seconds <= 3600 else {
            throw ValidationError("--seconds must be in (0, 3600] (got \(seconds))")
        }
        if let rounds, !(2...1000).contains(rounds) {
            throw ValidationError("--repeat must be in 2...1000: an interval needs two slices or more (got \(rounds))")
        }
        guard (0...10_000_000).contains(nioBackgroundTasks) else {
            throw ValidationError("--nio-background-tasks must be in 0...10000000 (got \(nioBackgroundTasks))")
        }
        guard fanoutTolerance != nil else {
            throw ValidationError("--tolerance must be 0 or a duration such as 500us or 1ms (got '\(tolerance)')")
        }
        guard let jitter = fanoutJitter, jitter < .milliseconds(100) else {
            throw ValidationError("--jitter must be 0 or a duration under the fan-out's 100 ms interval, such as 20ms (got '\(jitter)')")
        }
    }

    private var fanoutTolerance: Duration? { tolerance == "0" ? .zero : parseDuration(tolerance) }
    private var fanoutJitter: Duration? { jitter == "0" ? .zero : parseDuration(jitter) }

    func run() throws {
        let loadAverageBefore = MachineInfo.loadAverage()
        if listBackends {
            for backend in allBackends { print("\(backend.name) \(backend.scenarios.map(\.rawValue).joined(separator: ","))") }
            // Raw baselines join throughput runs of every backend (no --backend, no --no-raw).
            for baseline in rawBaselines where (quick ? 10_000 : timers.min() ?? 1_000) <= baseline.maxTimers {
                var scenarios = ["throughput"]
                if baseline.name != "foundation-raw" { scenarios.append("stalls") }
                if rawFanoutBaselines.contains(baseline.name) { scenarios.append("fanout") }
                print("\(baseline.name) \(scenarios.joined(separator: ","))")
            }
            // Fan-out only: raw timerfd and epoll_pwait2 programs (a heap, one wait per wake-up)
            // and a raw io_uring program (one timeout per timer).
            for name in [PWait2RawFanout.timerfdName, PWait2RawFanout.name, URingRawFanout.name] where unavailableBackends[name] == nil {
                print("\(name) fanout")
            }
            return
        }
        nioBackgroundTaskCount.store(nioBackgroundTasks, ordering: .relaxed)
        addNIOBackgroundTasks(to: benchEventLoopGroup.next())
        let seconds = quick ? 0.3 : self.seconds
        let rounds = self.rounds ?? (quick ? 3 : 10)
        let sizes = quick ? [10_000] : timers.isEmpty ? [1_000, 10_000, 100_000] : timers.sorted()
        let selected = backendNames.isEmpty ? allBackends : allBackends.filter { backendNames.contains($0.name) }
        let toRun = scenarios.isEmpty ? Scenario.allCases : scenarios
        var results: [BenchResult] = []
        for scenario in toRun {
            switch scenario {
            case .latency:
                var realTime = selected.filter(\.realTime)
                if selfCheck, let first = realTime.first {
                    realTime.append(first.relabelled(first.name + selfCheckSuffix))
                }
                if !realTime.isEmpty {
                    results += try runLatency(
                        backends: realTime, interval: interval.duration, seconds: seconds, rounds: rounds, load: load.load
                    ).map(
                        BenchResult.latency)
                }
            case .firstFire:
                results += try runFirstFire(backends: selected.filter(\.realTime), samples: quick ? 30 : 200, rounds: rounds).map(
                    BenchResult.firstFire)
            case .drift:
                results += try runDrift(
                    backends: selected.filter(\.realTime), interval: interval.duration,
                    seconds: quick ? 0.5 : driftSeconds
                ).map(BenchResult.drift)
            case .fanout:
                results += try runFanout(
                    backends: selected.filter(\.realTime), timers: quick ? 1000 : 10_000,
                    seconds: quick ? 0.6 : 3, rounds: rounds, tolerance: fanoutTolerance ?? .zero, jitter: fanoutJitter ?? .zero,
                    herd: herd,
                    // The raw baselines have random phases and no jitter: they run only beside that setup.
                    includeRaw: !noRaw && backendNames.isEmpty && !herd && fanoutJitter == .zero
                ).map(BenchResult.fanout)
            case .idle:
                results += try runIdle(backends: selected.filter(\.realTime), seconds: quick ? 0.6 : 3, rounds: rounds).map(
                    BenchResult.idle)
            case .display:
                // DisplayLink is an epoll-module feature: it runs when epoll is selected.
                if selected.contains(where: { $0.name == "epoll" }) {
                    results += try runDisplay(rates: [60, 120], seconds: seconds, rounds: rounds).map(BenchResult.display)
                }
            case .async:
                results += try runAsync(
                    backends: selected, interval: interval.duration, seconds: seconds * Self.asyncShare, rounds: rounds
                ).map(
                    BenchResult.async)
            case .throughput, .stalls:
                // Both run on every size, on the backends the bench can make directly; the raw
                // baselines join when every backend is compared (no --backend filter).
                let measurable = selected.filter { $0.make != nil }
                let includeRaw = !noRaw && backendNames.isEmpty
                for size in sizes where !measurable.isEmpty {
                    if scenario == .throughput {
                        results += try runThroughput(backends: measurable, timers: size, includeRaw: includeRaw).map(BenchResult.throughput)
                    } else {
                        results += try runStalls(backends: measurable, timers: size, includeRaw: includeRaw).map(BenchResult.stalls)
                    }
                }
            }
        }
        let report = BenchReport(
            machine: .current(loadAverageBefore: loadAverageBefore), arguments: Array(CommandLine.arguments.dropFirst()),
            nioBackgroundTasks: nioBackgroundTasks, results: results)
        print(json ? try report.json() : report.table())
        if let html {
            do {
                try report.html().write(toFile: html, atomically: true, encoding: .utf8)
            } catch {
                throw ValidationError("cannot write the HTML report to '\(html)': \(error.localizedDescription)")
            }
        }
    }
}
