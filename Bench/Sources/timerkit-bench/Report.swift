import BenchStatistics
import Foundation
import TimerKitEpoll

/// What the machine was, so figures from different machines are not compared blindly.
struct MachineInfo: Codable {
    var hostname: String
    var cpu: String
    var cores: Int
    var kernel: String
    var date: String
    /// The kernel's clock source (tsc, hpet, kvm-clock...): what every clock read costs.
    var clockSource: String
    /// How the bench was built (debug, release) and by which compiler.
    var build: String
    var compiler: String
    /// /proc/loadavg's 1-minute figure when the run began and when it ended.
    var loadAverageBefore: Double
    var loadAverageAfter: Double
    /// What a thread asking for SCHED_FIFO 80 got (the display floor's and vsync thread's
    /// request): "SCHED_FIFO 80" where permitted, else the fallback and why.
    var realtimePriority: String

    /// Asks for SCHED_FIFO 80 on a short-lived thread and says what it got.
    static func realtimePriorityGranted() -> String {
        let obtained = Locked("")
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let priority = ThreadPriority.realtime(80).applyToCurrentThread()
            obtained.withLock { $0 = priority.description }
            done.signal()
        }
        done.wait()
        return obtained.current
    }

    /// The 1-minute load average now.
    static func loadAverage() -> Double {
        let text = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? ""
        return text.split(separator: " ").first.flatMap { Double($0) } ?? -1
    }

    static func current(loadAverageBefore: Double) -> MachineInfo {
        let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model =
            cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
            .map { $0.split(separator: ":", maxSplits: 1).last.map { $0.trimmingCharacters(in: .whitespaces) } ?? "" } ?? "unknown"
        let kernel = ((try? String(contentsOfFile: "/proc/sys/kernel/osrelease", encoding: .utf8)) ?? "unknown")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let clockSource =
            ((try? String(contentsOfFile: "/sys/devices/system/clocksource/clocksource0/current_clocksource", encoding: .utf8))
            ?? "unknown").trimmingCharacters(in: .whitespacesAndNewlines)
        #if DEBUG
            let build = "debug"
        #else
            let build = "release"
        #endif
        #if compiler(>=6.4)
            let compiler = "Swift 6.4 or later"
        #elseif compiler(>=6.3)
            let compiler = "Swift 6.3"
        #else
            let compiler = "Swift before 6.3"
        #endif
        return MachineInfo(
            hostname: ProcessInfo.processInfo.hostName, cpu: model,
            cores: ProcessInfo.processInfo.activeProcessorCount, kernel: kernel,
            date: ISO8601DateFormatter().string(from: Date()), clockSource: clockSource, build: build, compiler: compiler,
            loadAverageBefore: loadAverageBefore, loadAverageAfter: loadAverage(), realtimePriority: realtimePriorityGranted())
    }
}

/// One result of any scenario; encodes as that scenario's own object, and decodes by its
/// `scenario` field (`timerkit-bench markdown` reads a saved run).
enum BenchResult: Codable {
    case latency(LatencyResult)
    case throughput(ThroughputResult)
    case stalls(StallsResult)
    case display(DisplayResult)
    case idle(IdleResult)
    case firstFire(FirstFireResult)
    case drift(DriftResult)
    case fanout(FanoutResult)
    case async(AsyncResult)

    private enum Key: String, CodingKey { case scenario }

    init(from decoder: any Decoder) throws {
        let scenario = try decoder.container(keyedBy: Key.self).decode(String.self, forKey: .scenario)
        switch scenario {
        case "latency": self = .latency(try LatencyResult(from: decoder))
        case "throughput": self = .throughput(try ThroughputResult(from: decoder))
        case "stalls": self = .stalls(try StallsResult(from: decoder))
        case "display": self = .display(try DisplayResult(from: decoder))
        case "idle": self = .idle(try IdleResult(from: decoder))
        case "first-fire": self = .firstFire(try FirstFireResult(from: decoder))
        case "drift": self = .drift(try DriftResult(from: decoder))
        case "fanout": self = .fanout(try FanoutResult(from: decoder))
        case "async": self = .async(try AsyncResult(from: decoder))
        default:
            throw DecodingError.dataCorruptedError(
                forKey: .scenario, in: try decoder.container(keyedBy: Key.self), debugDescription: "unknown scenario '\(scenario)'")
        }
    }

    func encode(to encoder: any Encoder) throws {
        switch self {
        case let .idle(result): try result.encode(to: encoder)
        case let .firstFire(result): try result.encode(to: encoder)
        case let .drift(result): try result.encode(to: encoder)
        case let .fanout(result): try result.encode(to: encoder)
        case let .async(result): try result.encode(to: encoder)
        case let .display(result): try result.encode(to: encoder)
        case let .latency(result): try result.encode(to: encoder)
        case let .throughput(result): try result.encode(to: encoder)
        case let .stalls(result): try result.encode(to: encoder)
        }
    }
}

struct BenchReport: Codable {
    var machine: MachineInfo
    /// The arguments the bench ran with (nil in runs saved before it was recorded).
    var arguments: [String]?
    /// NIO tasks an hour away kept on every NIO loop measured (`--nio-background-tasks`).
    var nioBackgroundTasks: Int
    /// Backends this machine could not run, with the reason: a run without them says so.
    var leftOut: [String: String] = unavailableBackends
    var results: [BenchResult]

    init(
        machine: MachineInfo, arguments: [String]?, nioBackgroundTasks: Int, leftOut: [String: String] = unavailableBackends,
        results: [BenchResult]
    ) {
        self.machine = machine
        self.arguments = arguments
        self.nioBackgroundTasks = nioBackgroundTasks
        self.leftOut = leftOut
        self.results = results
    }

    /// A run saved before `left_out` was recorded left nothing out that it knew of: it reads as
    /// an empty list, not as this machine's.
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        machine = try container.decode(MachineInfo.self, forKey: .machine)
        arguments = try container.decodeIfPresent([String].self, forKey: .arguments)
        nioBackgroundTasks = try container.decode(Int.self, forKey: .nioBackgroundTasks)
        leftOut = try container.decodeIfPresent([String: String].self, forKey: .leftOut) ?? [:]
        results = try container.decode([BenchResult].self, forKey: .results)
    }

    /// A run saved with `--json`.
    static func load(from path: String) throws -> BenchReport {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return try decoder.decode(BenchReport.self, from: try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        // The JSON's keys are snake_case ("lateness_us"), the Swift names camelCase.
        encoder.keyEncodingStrategy = .convertToSnakeCase
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }

    func table() -> String {
        var out = "TimerKit bench on \(machine.cpu), \(machine.cores) cores, Linux \(machine.kernel)\n"
        if nioBackgroundTasks > 0 { out += "every NIO loop (nio, nio-raw) also held \(nioBackgroundTasks) NIO tasks an hour away\n" }
        for (name, reason) in leftOut.sorted(by: { $0.key < $1.key }) { out += "left out: \(name): \(reason)\n" }
        let latency = results.compactMap { if case let .latency(r) = $0 { r } else { nil } }
        if !latency.isEmpty {
            // Read every figure against the floor when it ran, else against the best backend.
            let reference = latency.first { $0.backend == "floor" } ?? latency.min { $0.latenessUs.p50 < $1.latenessUs.p50 }
            let refName = reference?.backend ?? "best"
            let refP50 = reference?.latenessUs.p50 ?? 0
            let load = latency.first { $0.load != "none" }?.load ?? "none"
            out +=
                "\nlatency: lateness of a repeating \(format(latency[0].intervalUs)) µs timer, load \(load) (µs; p50 first, compare inside one run)\n"
            if load == "busy-loop" { out += "(the floor has no loop to load: it runs unloaded, as the reference)\n" }
            out += aligned(
                [
                    [
                        "backend", "p50", "slices' p50, 95 %", "p90", "p99", "p99.9", "max", "fires", "missed", "p50 − \(refName)",
                        "p50 / \(refName)",
                    ]
                ]
                    + latency.map { r in
                        [
                            r.backend, format(r.latenessUs.p50), interval(r.p50Us), format(r.latenessUs.p90), format(r.latenessUs.p99),
                            format(r.latenessUs.p999), format(r.latenessUs.max), "\(r.fires)", "\(r.missed)",
                            String(format: "%+.1f", r.latenessUs.p50 - refP50),
                            refP50 > 0 ? String(format: "%.2fx", r.latenessUs.p50 / refP50) : "-",
                        ]
                    })
            let clocked = latency.filter { $0.clockP50Us != nil }
            if !clocked.isEmpty {
                out += "\nthe same repeating timer on each clock, side by side on each backend (lateness p50, µs)\n"
                out += aligned(
                    [["backend", "monotonic", "continuous", "wall"]]
                        + clocked.map { r in
                            [r.backend] + ["monotonic", "continuous", "wall"].map { r.clockP50Us?[$0].map(format) ?? "-" }
                        })
            }
            let described = latency.filter { $0.statistics != nil }
            if !described.isEmpty {
                out += "\nwhat each backend's statistics said over the same slices (µs; busy: time in handlers)\n"
                out += aligned(
                    [
                        [
                            "backend", "fires", "late p50", "p90", "p99", "max", "handler p50", "p99", "busy %", "missed",
                            "longest handler", "agrees",
                        ]
                    ]
                        + described.compactMap { r in
                            guard let s = r.statistics else { return nil }
                            return [
                                r.backend, "\(s.fires)", format(s.latenessP50Us), format(s.latenessP90Us), format(s.latenessP99Us),
                                format(s.latenessMaxUs), format(s.handlerP50Us), format(s.handlerP99Us),
                                String(format: "%.3f", s.busyPercent),
                                "\(s.missed)", "\(s.longestHandler) \(format(s.longestHandlerUs))",
                                s.agreesWithBench.map { $0 ? "yes" : "NO: \(s.agreement ?? "")" } ?? "-",
                            ]
                        })
            }
        }
        for second in latency where second.backend.hasSuffix(selfCheckSuffix) {
            guard let first = latency.first(where: { $0.backend + selfCheckSuffix == second.backend }) else { continue }
            let verdict = Verdict(from: first.p50Us, to: second.p50Us)
            out +=
                "self-check: \(first.backend) measured twice, p50 \(interval(first.p50Us)) vs \(interval(second.p50Us)): \(verdict.rawValue)\n"
        }
        let throughput = results.compactMap { if case let .throughput(r) = $0 { r } else { nil } }
        if !throughput.isEmpty {
            out += "\nthroughput: schedule, reset each to a later deadline, then cancel, in random order; deadlines 1–2 h\n"
            out += "(ns per operation: median of 1,000-operation batches ± half its 95 % interval, p99 of the batches in brackets)\n"
            out += aligned(
                [["backend", "timers", "schedule ns", "reset ns", "cancel ns", "bytes/timer (RSS)", "heap bytes/timer"]]
                    + throughput.map { r in
                        [
                            r.backend, "\(r.timers)",
                            "\(format(r.scheduleNs)) \(plusMinus(r.scheduleNsEstimate)) [\(format(r.scheduleNsP99))]",
                            "\(format(r.resetNs)) \(plusMinus(r.resetNsEstimate)) [\(format(r.resetNsP99))]",
                            "\(format(r.cancelNs)) \(plusMinus(r.cancelNsEstimate)) [\(format(r.cancelNsP99))]",
                            format(r.bytesPerTimer),
                            format(r.heapBytesPerTimer),
                        ]
                    })
        }
        let stalls = results.compactMap { if case let .stalls(r) = $0 { r } else { nil } }
        if !stalls.isEmpty {
            out += "\nstalls: the longest single operation, each timed on its own, in two runs of the same workload\n"
            out += "(µs: the longest both runs agree on, at which operation, and each run's longest; ops ≥ 50 µs in both runs)\n"
            out += aligned(
                [["backend", "timers", "phase", "longest agreed µs", "at op", "each run's longest µs", "p99.99 µs", "ops ≥ 50 µs"]]
                    + stalls.flatMap { r in
                        r.phases.map { p in
                            [
                                r.backend, "\(r.timers)", p.phase, format(p.recurringMaxNs / 1000), "\(p.recurringIndex)",
                                p.maxNs.map { format($0 / 1000) }.joined(separator: " / "), format(p.recurringP9999Ns / 1000),
                                "\(p.recurringOver50Us)",
                            ]
                        }
                    })
        }
        let firstFire = results.compactMap { if case let .firstFire(r) = $0 { r } else { nil } }
        if !firstFire.isEmpty {
            out += "\nfirst-fire: lateness of the only fire of a fresh 1 ms one-shot (µs)\n"
            out += aligned(
                [["backend", "samples", "p50", "rounds' p50, 95 %", "p90", "p99", "max"]]
                    + firstFire.map { r in
                        [
                            r.backend, "\(r.samples)", format(r.latenessUs.p50), interval(r.p50Us), format(r.latenessUs.p90),
                            format(r.latenessUs.p99), format(r.latenessUs.max),
                        ]
                    })
        }
        let drift = results.compactMap { if case let .drift(r) = $0 { r } else { nil } }
        if !drift.isEmpty {
            out += "\ndrift: lateness p50 of the first and last tenth of a long repeating run (µs; equal = no drift)\n"
            out += aligned(
                [["backend", "seconds", "first tenth", "last tenth", "grid error"]]
                    + drift.map { r in
                        [r.backend, format(r.seconds), format(r.firstTenthP50Us), format(r.lastTenthP50Us), format(r.gridErrorUs)]
                    })
        }
        let fanout = results.compactMap { if case let .fanout(r) = $0 { r } else { nil } }
        if !fanout.isEmpty {
            let phases = fanout[0].herd ? "one phase (a herd)" : "random phases"
            let jitter = fanout[0].jitterUs > 0 ? ", jitter \(format(fanout[0].jitterUs)) µs" : ""
            let raw = fanout.contains { $0.backend == "libevent-raw" } ? " (libevent-raw: no TimerKit, no tolerance)" : ""
            out += "\nfanout: \(fanout[0].timers) repeating timers at 100 ms, \(phases)\(jitter)\(raw)\n"
            out += aligned(
                [
                    [
                        "backend", "tolerance µs", "fires", "CPU ns/fire", "rounds' CPU ns/fire, 95 %", "peak fires/ms", "late p50 µs",
                        "late p99 µs", "late max µs",
                        "max − tolerance",
                    ]
                ]
                    + fanout.map { r in
                        [
                            r.backend, format(r.toleranceUs), "\(r.fires)", format(r.cpuNsPerFire), interval(r.cpuNsPerFireEstimate),
                            format(r.peakFiresPerMs),
                            format(r.latenessUs.p50), format(r.latenessUs.p99), format(r.latenessUs.max),
                            format(r.maxLatenessOverToleranceUs),
                        ]
                    })
        }
        let idle = results.compactMap { if case let .idle(r) = $0 { r } else { nil } }
        if !idle.isEmpty {
            out += "\nidle: wake-ups while the only timer is an hour away (goal 0 above the no-backend baseline)\n"
            out += aligned(
                [["backend", "seconds", "wake-ups", "above baseline", "rounds' above baseline per s, 95 %"]]
                    + idle.map {
                        [
                            $0.backend, format($0.seconds), "\($0.wakeups)", "\($0.wakeupsAboveBaseline)",
                            interval($0.wakeupsPerSecondAboveBaseline),
                        ]
                    })
        }
        let display = results.compactMap { if case let .display(r) = $0 { r } else { nil } }
        if !display.isEmpty {
            out += "\ndisplay: a full-rate DisplayLink vs a bare timerfd at the same period and priority (µs)\n"
            out += aligned(
                [
                    [
                        "rate", "source", "frames", "dropped", "jitter p50", "jitter p99", "late p50", "rounds' late p50, 95 %", "late p99",
                        "priority",
                    ]
                ]
                    + display.map { r in
                        [
                            "\(r.refreshHz) Hz", r.backend, "\(r.frames)", "\(r.dropped)", format(r.jitterUs.p50),
                            format(r.jitterUs.p99),
                            format(r.latenessUs.p50), interval(r.latenessP50Us), format(r.latenessUs.p99), r.priority,
                        ]
                    })
        }
        let async = results.compactMap { if case let .async(r) = $0 { r } else { nil } }
        if !async.isEmpty {
            out += "\nasync: lateness seen by a task waiting on a \(format(async[0].intervalUs)) µs grid, after it resumed (µs)\n"
            out += "(executor: the task's, global or the backend's loop; callback p50: the same backend's handler in the same run;\n"
            out += " Task.sleep and AsyncTimerSequence are the baselines"
            out += async[0].floorP50Us.map { "; the timerfd floor's p50 was \(format($0))" } ?? ""
            out += ")\n"
            out += aligned(
                [
                    [
                        "backend", "mode", "executor", "samples", "p50", "rounds' p50, 95 %", "p90", "p99", "max", "callback p50",
                        "p50 − callback",
                    ]
                ]
                    + async.map { r in
                        [
                            r.backend, r.mode, r.executor, "\(r.samples)", format(r.latenessUs.p50), interval(r.p50Us),
                            format(r.latenessUs.p90),
                            format(r.latenessUs.p99),
                            format(r.latenessUs.max), r.callbackP50Us.map(format) ?? "-",
                            r.callbackP50Us.map { String(format: "%+.1f", r.latenessUs.p50 - $0) } ?? "-",
                        ]
                    })
        }
        return out
    }
}

func format(_ value: Double) -> String {
    value >= 100 ? String(format: "%.0f", value) : String(format: "%.1f", value)
}

/// Pads columns: the first left-aligned, the rest right-aligned.
func aligned(_ rows: [[String]]) -> String {
    guard let columns = rows.first?.count else { return "" }
    let widths = (0..<columns).map { c in rows.map { $0[c].count }.max() ?? 0 }
    return rows.map { row in
        row.enumerated().map { c, cell in
            let pad = String(repeating: " ", count: widths[c] - cell.count)
            return c == 0 ? cell + pad : pad + cell
        }.joined(separator: "  ")
    }.joined(separator: "\n") + "\n"
}

/// "±x", half an estimate's 95 % interval, or "(1 batch)" when one slice gives no interval.
func plusMinus(_ estimate: Estimate) -> String {
    estimate.slices.count < 2 ? "(1 batch)" : "±\(format(estimate.halfWidth))"
}

/// "median [low, high]" of an estimate's slices.
func interval(_ estimate: Estimate) -> String {
    estimate.slices.count < 2 ? "-" : "\(format(estimate.median)) [\(format(estimate.ci95Low)), \(format(estimate.ci95High))]"
}
