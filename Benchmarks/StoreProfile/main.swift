// A fixed workload on the timer store, for valgrind (instruction counts per operation, which do
// not move with the machine's load) and profilers: LIVE timers 1–2 hours away on BACKEND (manual
// or epoll, held as `any TimerBackend`, as an application holds it), then PAIRS times a schedule
// of one more and a cancel of a random live one (so LIVE stay live), then RESETS moves of random
// live timers to later deadlines. Running it with and without the pairs (or resets) and
// subtracting gives the figures per operation (`scripts/instruction-budget.py` does).
//
//     store-profile BACKEND LIVE PAIRS RESETS [keys]
//     store-profile fires FIRES [nostats]
//     store-profile loop-fires epoll|epoll-pwait2|io_uring|libevent|dispatch|runloop|display FIRES
//
// With `keys`, the timers are scheduled through the key path (`schedule(_:calling:)`, one
// callback object for all of them) instead of with a closure each. `fires` makes FIRES fires of
// one repeating timer on virtual time (the Manual fire path; run with 0 and subtract); with
// `nostats`, with the scheduler recording no statistics (the difference is what recording costs).
// `loop-fires` makes FIRES fires of a repeating 1 ms timer (tolerance 0) on a real backend's
// loop thread: the user-space instructions of a wake-up, its fire and the re-arm (run with 0
// and subtract; a millisecond apart, each fire is a wake-up of its own even under valgrind,
// which knows neither epoll_pwait2 nor io_uring, and under which a run loop spins). `display` is
// a display link's frames on a 1,000 Hz `DisplaySource` instead.
import Foundation
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll
import TimerKitLibevent
import TimerKitURing

/// Xorshift64* with a fixed seed: the same workload every run, and no system call per draw.
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
/// its timer later (than its first deadline and than any earlier reset's).
func laterDeadline(_ index: Int) -> Duration {
    .nanoseconds(7_200_000_000_000 + Int64(index) * 100_000)
}

/// The one callback of the key path's timers: nothing comes due while the workload runs.
final class Ignored: TimerCallback {
    func timerFired(_ fire: TimerFire) {}
}

// The workloads are functions: top-level variables are globals, and the runtime checks every
// access to a global for exclusivity (80 instructions per pair that are not the store's).
func keyWorkload(_ backend: any TimerBackend, live: Int, pairs: Int, resets: Int) throws {
    var random = Workload(state: 19)
    let callback = Ignored()
    var timers = try (0..<live).map { _ in try backend.schedule(.after(deadline(&random)), calling: callback) }
    try keyPairs(backend, &timers, pairs: pairs, callback: callback, &random)
    try keyResets(backend, timers, resets: resets, &random)
}

// The measured loops are functions of their own, so that a profiler can collect inside them
// alone (`valgrind --tool=callgrind --toggle-collect='*keyPairs*'`).
@inline(never)
func keyPairs(_ backend: any TimerBackend, _ timers: inout [TimerKey], pairs: Int, callback: Ignored, _ random: inout Workload) throws {
    for _ in 0..<pairs {
        let index = Int.random(in: 0..<timers.count, using: &random)
        let replacement = try backend.schedule(.after(deadline(&random)), calling: callback)
        backend.cancel(timers[index])
        timers[index] = replacement
    }
}

@inline(never)
func keyResets(_ backend: any TimerBackend, _ timers: [TimerKey], resets: Int, _ random: inout Workload) throws {
    for reset in 0..<resets {
        try backend.reschedule(timers[Int.random(in: 0..<timers.count, using: &random)], .after(laterDeadline(reset)))
    }
}

func handleWorkload(_ backend: any TimerBackend, live: Int, pairs: Int, resets: Int) throws {
    var random = Workload(state: 19)
    var handles = try (0..<live).map { _ in try backend.schedule(.after(deadline(&random))) { _ in } }
    try handlePairs(backend, &handles, pairs: pairs, &random)
    try handleResets(handles, resets: resets, &random)
}

@inline(never)
func handlePairs(_ backend: any TimerBackend, _ handles: inout [TimerHandle], pairs: Int, _ random: inout Workload) throws {
    for _ in 0..<pairs {
        let index = Int.random(in: 0..<handles.count, using: &random)
        let replacement = try backend.schedule(.after(deadline(&random))) { _ in }
        handles[index].cancel()
        handles[index] = replacement
    }
}

@inline(never)
func handleResets(_ handles: [TimerHandle], resets: Int, _ random: inout Workload) throws {
    for reset in 0..<resets {
        try handles[Int.random(in: 0..<handles.count, using: &random)].reschedule(.after(laterDeadline(reset)))
    }
}

/// FIRES fires of one repeating timer on virtual time, as the fire-path benchmark makes them.
@inline(never)
func fireWorkload(fires: Int, recordingStatistics: Bool) throws {
    let clock = ManualBackend(registry: TimerRegistry())
    defer { clock.shutdown() }
    clock.scheduler.recordsFireStatistics = recordingStatistics
    try clock.schedule(.every(.microseconds(100))) { _ in }
    clock.advance(by: .milliseconds(10))  // steady state, as the benchmark has it
    firePath(clock, fires: fires)
}

@inline(never)
func firePath(_ clock: ManualBackend, fires: Int) {
    for _ in 0..<fires { clock.advance(by: .microseconds(100)) }
}

/// FIRES fires of a repeating 1 ms timer on a real backend's loop.
func loopFireWorkload(backend name: String, fires: Int) throws {
    if name == "display" { return try displayFrameWorkload(frames: fires) }
    let backend: any TimerBackend =
        switch name {
        case "epoll": try EpollBackend(registry: TimerRegistry())
        case "epoll-pwait2": try EpollBackend(options: .init(waitMode: .epollPwait2), registry: TimerRegistry())
        case "libevent": try LibeventBackend(registry: TimerRegistry())
        case "dispatch": DispatchBackend(registry: TimerRegistry())
        case "runloop": try RunLoopBackend(registry: TimerRegistry())
        default: try IOURingBackend(registry: TimerRegistry())
        }
    defer { backend.shutdown() }
    let done = DispatchSemaphore(value: 0)
    let count = Counter(limit: fires)
    try backend.schedule(.every(.milliseconds(1))) { _ in if count.increment() { done.signal() } }
    if fires > 0 { done.wait() }
}

/// FRAMES frames of a display link on a 1,000 Hz source.
func displayFrameWorkload(frames: Int) throws {
    let source = try DisplaySource(refreshRate: 1000, priority: .normal, registry: TimerRegistry())
    defer { source.shutdown() }
    let done = DispatchSemaphore(value: 0)
    let count = Counter(limit: frames)
    let link = try source.addLink { _ in if count.increment() { done.signal() } }
    if frames > 0 { done.wait() }
    link.invalidate()
}

/// Counts fires on the loop thread; says when the limit is reached.
final class Counter: @unchecked Sendable {
    // @unchecked: only the backend's loop thread touches `count` (one timer, one loop).
    private var count = 0
    let limit: Int
    init(limit: Int) { self.limit = limit }
    func increment() -> Bool {
        count += 1
        return count == limit
    }
}

if CommandLine.arguments.count == 4, CommandLine.arguments[1] == "loop-fires",
    ["epoll", "epoll-pwait2", "io_uring", "libevent", "dispatch", "runloop", "display"].contains(CommandLine.arguments[2]),
    let fires = Int(CommandLine.arguments[3]), fires >= 0
{
    do {
        try loopFireWorkload(backend: CommandLine.arguments[2], fires: fires)
        print("loop-fires \(fires)")
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("store-profile: \(error)\n".utf8))
        exit(1)
    }
}

if CommandLine.arguments.count == 3 || (CommandLine.arguments.count == 4 && CommandLine.arguments[3] == "nostats"),
    CommandLine.arguments[1] == "fires", let fires = Int(CommandLine.arguments[2]), fires >= 0
{
    do {
        try fireWorkload(fires: fires, recordingStatistics: CommandLine.arguments.count == 3)
        print("fires \(fires)")
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("store-profile: \(error)\n".utf8))
        exit(1)
    }
}

let arguments = CommandLine.arguments.dropFirst()
let counts = arguments.dropFirst().prefix(3).map { Int($0) }
guard arguments.count >= 4, ["manual", "epoll"].contains(arguments.first), counts.count == 3,
    let live = counts[0], let pairs = counts[1], let resets = counts[2], live > 0, pairs >= 0, resets >= 0
else {
    let usage = """
        usage: store-profile manual|epoll LIVE PAIRS RESETS [keys] (LIVE > 0, the others >= 0), \
        or store-profile fires FIRES, \
        or store-profile loop-fires epoll|epoll-pwait2|io_uring|libevent|dispatch|runloop|display FIRES

        """
    FileHandle.standardError.write(Data(usage.utf8))
    exit(2)
}
let keys = arguments.last == "keys"
do {
    let backend: any TimerBackend =
        arguments.first == "epoll" ? try EpollBackend(registry: TimerRegistry()) : ManualBackend(registry: TimerRegistry())
    if keys {
        try keyWorkload(backend, live: live, pairs: pairs, resets: resets)
    } else {
        try handleWorkload(backend, live: live, pairs: pairs, resets: resets)
    }
    print("\(arguments.first ?? ""): live \(backend.statistics.liveTimers), pairs \(pairs), resets \(resets)\(keys ? ", keys" : "")")
    backend.shutdown()
} catch {
    FileHandle.standardError.write(Data("store-profile: \(error)\n".utf8))
    exit(1)
}
