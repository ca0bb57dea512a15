// A fixed workload on the timer store, for profilers (`perf record`, valgrind's cachegrind):
// LIVE timers scheduled on a Manual backend with deadlines 1–2 hours away, then PAIRS times a
// schedule of one more and a cancel of a random live one (so LIVE stay live), then RESETS
// reschedules of random live timers to later deadlines. Running it twice, with and without
// the pairs (or resets), and subtracting gives a profiler's figures per operation.
//
//     store-profile LIVE PAIRS RESETS [keys]
//
// With `keys`, the timers are scheduled through the key path (`schedule(_:calling:)`, one
// callback object for all of them) instead of with a closure each.
import Foundation
import TimerKit

let keys = CommandLine.arguments.last == "keys"
let arguments = CommandLine.arguments.dropFirst().prefix(3).map { Int($0) }
guard arguments.count == 3, let live = arguments[0], let pairs = arguments[1], let resets = arguments[2],
    live > 0, pairs >= 0, resets >= 0
else {
    FileHandle.standardError.write(Data("usage: store-profile LIVE PAIRS RESETS [keys] (LIVE > 0, the others >= 0)\n".utf8))
    exit(2)
}

/// The one callback of the key path's timers: nothing comes due while the workload runs.
final class Ignored: TimerCallback {
    func timerFired(_ fire: TimerFire) {}
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

/// Reset `index`'s deadline: 2 hours away plus 100 µs per reset before it, so every reset moves
/// its timer later (than its first deadline, 1–2 hours away, and than any earlier reset's).
func laterDeadline(_ index: Int) -> Duration {
    .nanoseconds(7_200_000_000_000 + Int64(index) * 100_000)
}

do {
    var random = Workload(state: 19)
    let backend = ManualBackend(registry: TimerRegistry())
    if keys {
        let callback = Ignored()
        var timers = try (0..<live).map { _ in try backend.schedule(.after(deadline(&random)), calling: callback) }
        for _ in 0..<pairs {
            let index = Int.random(in: 0..<live, using: &random)
            let replacement = try backend.schedule(.after(deadline(&random)), calling: callback)
            backend.cancel(timers[index])
            timers[index] = replacement
        }
        for reset in 0..<resets {
            try backend.reschedule(timers[Int.random(in: 0..<live, using: &random)], .after(laterDeadline(reset)))
        }
    } else {
        var handles = try (0..<live).map { _ in try backend.schedule(.after(deadline(&random))) { _ in } }
        for _ in 0..<pairs {
            let index = Int.random(in: 0..<live, using: &random)
            let replacement = try backend.schedule(.after(deadline(&random))) { _ in }
            handles[index].cancel()
            handles[index] = replacement
        }
        for reset in 0..<resets {
            try handles[Int.random(in: 0..<live, using: &random)].reschedule(.after(laterDeadline(reset)))
        }
    }
    print("live \(backend.statistics.liveTimers), pairs \(pairs), resets \(resets)\(keys ? ", keys" : "")")
    backend.shutdown()
} catch {
    FileHandle.standardError.write(Data("store-profile: \(error)\n".utf8))
    exit(1)
}
