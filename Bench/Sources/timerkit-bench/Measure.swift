import CBenchSystem
import Foundation
import Glibc
import Histogram
import TimerKit

/// Lateness percentiles in microseconds.
struct Percentiles: Codable {
    var p50: Double
    var p90: Double
    var p99: Double
    var p999: Double
    var max: Double

    init(_ histogram: Histogram<UInt64>) {
        func us(_ percentile: Double) -> Double {
            histogram.totalCount == 0 ? 0 : Double(histogram.valueAtPercentile(percentile)) / 1000
        }
        p50 = us(50)
        p90 = us(90)
        p99 = us(99)
        p999 = us(99.9)
        max = histogram.totalCount == 0 ? 0 : Double(histogram.max) / 1000
    }
}

/// A nanosecond histogram from 1 ns to 100 s, three significant digits.
func makeHistogram() -> Histogram<UInt64> {
    Histogram<UInt64>(lowestDiscernibleValue: 1, highestTrackableValue: 100_000_000_000, numberOfSignificantValueDigits: .three)
}

/// Resident set size in bytes, from /proc/self/statm.
func residentBytes() -> Int {
    guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = statm.split(separator: " ")
    guard fields.count >= 2, let pages = Int(fields[1]) else { return 0 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// Bytes the allocator has handed out and not had back (mallinfo2's `uordblks`).
func heapBytesInUse() -> Int { Int(mallinfo2().uordblks) }

/// Returns freed memory to the kernel so the next RSS reading starts from a clean floor.
func releaseFreeMemory() { _ = malloc_trim(0) }

/// Parses "250us", "1ms", "2s", "1.5ms", "500ns" into a Duration.
func parseDuration(_ text: String) -> Duration? {
    let units: [(String, Double)] = [("ns", 1), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)]
    for (suffix, scale) in units where text.hasSuffix(suffix) {
        guard let value = Double(text.dropLast(suffix.count)), value.isFinite, value > 0 else { return nil }
        return .nanoseconds(Int64(value * scale))
    }
    return nil
}

/// A progress line on stderr, only when stderr is a terminal.
func progress(_ message: String) {
    guard isatty(2) != 0 else { return }
    FileHandle.standardError.write(Data("\r\u{1B}[K\(message)".utf8))
}

func progressDone() {
    guard isatty(2) != 0 else { return }
    FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
}

/// Runs `body` once per backend (baselines have no instance and are skipped) on a fresh
/// instance with a private registry, shut down afterwards.
func eachInstance<Result>(
    of backends: [BenchBackend], scenario: String,
    _ body: (BenchBackend, any TimerBackend) throws -> Result?
) throws -> [Result] {
    try backends.compactMap { backend in
        guard let make = backend.make else { return nil }
        progress("\(scenario): \(backend.name)")
        let instance = try make(TimerRegistry())
        defer { instance.shutdown() }
        return try body(backend, instance)
    }
}

/// Runs `body` for every subject, `rounds` times, interleaved (A B C, B C A, C A B …): each
/// round is one slice of every subject's measurement, in an order rotated each round, so the
/// machine's noise falls on every subject alike and no subject always follows the same one.
func inRounds<Subject>(
    _ subjects: [Subject], rounds: Int, scenario: String, name: (Subject) -> String,
    _ body: (Subject) throws -> Void
) rethrows {
    for round in 0..<rounds {
        let shift = subjects.isEmpty ? 0 : round % subjects.count
        for subject in subjects[shift...] + subjects[..<shift] {
            progress("\(scenario): round \(round + 1)/\(rounds) \(name(subject))")
            try body(subject)
        }
    }
    progressDone()
}
