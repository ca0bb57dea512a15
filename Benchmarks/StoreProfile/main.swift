// A fixed workload on the timer store, for profilers (`perf record`, valgrind's cachegrind):
// LIVE timers scheduled on a Manual backend with deadlines 1–2 hours away, then PAIRS times a
// schedule of one more and a cancel of a random live one (so LIVE stay live), then RESETS
// reschedules of random live timers to later deadlines. Running it twice, with and without
// the pairs (or resets), and subtracting gives a profiler's figures per operation.
//
//     store-profile LIVE PAIRS RESETS
import Foundation
import TimerKit

let arguments = CommandLine.arguments.dropFirst().map { Int($0) }
guard arguments.count == 3, let live = arguments[0], let pairs = arguments[1], let resets = arguments[2],
    live > 0, pairs >= 0, resets >= 0
else {
    FileHandle.standardError.write(Data("usage: store-profile LIVE PAIRS RESETS (LIVE > 0, the others >= 0)\n".utf8))
    exit(2)
}

/// Xorshift64* with a fixed seed: the same workload every run, and no system call per draw
/// (the system's generator would be most of a profile).
struct Workload: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 0x2545_F491_4F6C_DD1D
    }
}

/// 1–2 hours away: nothing comes due while the workload runs.
func deadline(_ random: inout Workload) -> Duration {
    .nanoseconds(Int64.random(in: 3_600_000_000_000...7_200_000_000_000, using: &random))
}

do {
    var random = Workload(state: 19)
    let backend = ManualBackend(registry: TimerRegistry())
    var handles = try (0..<live).map { _ in try backend.schedule(.after(deadline(&random))) { _ in } }
    for _ in 0..<pairs {
        let index = Int.random(in: 0..<live, using: &random)
        let replacement = try backend.schedule(.after(deadline(&random))) { _ in }
        handles[index].cancel()
        handles[index] = replacement
    }
    for _ in 0..<resets {
        try handles[Int.random(in: 0..<live, using: &random)].reschedule(.after(deadline(&random) + .seconds(3600)))
    }
    print("live \(backend.statistics.liveTimers), pairs \(pairs), resets \(resets)")
    backend.shutdown()
} catch {
    FileHandle.standardError.write(Data("store-profile: \(error)\n".utf8))
    exit(1)
}
