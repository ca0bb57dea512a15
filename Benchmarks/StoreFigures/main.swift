// The timer store's figures through the public API alone, so that the same source builds against
// any commit since 0.1 (`scripts/store-figures.sh` builds it against each commit it is given and
// runs them interleaved): on BACKEND (manual or epoll, held as `any TimerBackend`), schedule N
// timers 1–60 s away, move each once to a fresh random deadline 1–60 s away (in random order),
// then cancel each (in another random order). Prints one JSON line: nanoseconds per schedule, reset
// and cancel, and the resident bytes per live timer (the process's RSS after the schedules less
// before them, the array that holds the handles included: 8 bytes a timer).
//
//     store-figures BACKEND N
//
// Below 100,000 timers the three phases repeat until 1,000,000 operations of each kind have run,
// on the same backend, so that a run times more than a few microseconds.
// Built with `-D KEYS`, `store-figures BACKEND N keys` runs the key path instead (`schedule(_:calling:)`,
// one callback object for all the timers), which commits before 0.3 do not have.
//
// `gathered` (after N or after `keys`): the reset and cancel phases read their operands (the handle
// or key, the new delay) from arrays laid out in the order they use them, made before the clock
// starts, as an event loop has at hand the connection it serves and the key or handle it keeps.
// Without it each operation picks its operands from the arrays in random order: among a million
// timers that is a miss to memory of the harness's own (about 150 ns here) in every operation's
// time, beside the store's.
import Foundation
import TimerKit
import TimerKitEpoll

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

func deadlines(_ count: Int, _ random: inout Workload) -> [Duration] {
    (0..<count).map { _ in .nanoseconds(Int64.random(in: 1_000_000_000...60_000_000_000, using: &random)) }
}

func residentBytes() -> Int {
    let fields = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8))?.split(separator: " ") ?? []
    return fields.count > 1 ? (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE))) : 0
}

struct Figures {
    var schedule = Duration.zero
    var reset = Duration.zero
    var cancel = Duration.zero
    var bytes = 0
    var refusedResets = 0
}

/// One round: the three phases on `count` timers, each phase timed on its own.
let gathered = CommandLine.arguments.dropFirst(3).contains("gathered")

func handleRound(_ backend: any TimerBackend, _ count: Int, _ random: inout Workload, _ figures: inout Figures) throws {
    let first = deadlines(count, &random)
    let second = deadlines(count, &random)
    let resetOrder = (0..<count).shuffled(using: &random)
    let cancelOrder = (0..<count).shuffled(using: &random)
    var handles: [TimerHandle] = []
    handles.reserveCapacity(count)
    let before = residentBytes()
    let clock = ContinuousClock()
    var start = clock.now
    for deadline in first { handles.append(try backend.schedule(.after(deadline)) { _ in }) }
    figures.schedule += clock.now - start
    figures.bytes = max(figures.bytes, residentBytes() - before)
    if gathered {
        let resets = resetOrder.map { (handles[$0], second[$0]) }
        start = clock.now
        for (handle, delay) in resets {
            do { try handle.reschedule(.after(delay)) } catch { figures.refusedResets += 1 }
        }
        figures.reset += clock.now - start
        let cancels = cancelOrder.map { handles[$0] }
        start = clock.now
        for handle in cancels { handle.cancel() }
        figures.cancel += clock.now - start
        return
    }
    start = clock.now
    for index in resetOrder {
        // On epoll a timer 1 s away may have fired before its reset: it is not counted as an error.
        do { try handles[index].reschedule(.after(second[index])) } catch { figures.refusedResets += 1 }
    }
    figures.reset += clock.now - start
    start = clock.now
    for index in cancelOrder { handles[index].cancel() }
    figures.cancel += clock.now - start
}

#if KEYS
    final class Ignored: TimerCallback {
        func timerFired(_ fire: TimerFire) {}
    }

    func keyRound(_ backend: any TimerBackend, _ count: Int, _ random: inout Workload, _ figures: inout Figures) throws {
        let callback = Ignored()
        let first = deadlines(count, &random)
        let second = deadlines(count, &random)
        let resetOrder = (0..<count).shuffled(using: &random)
        let cancelOrder = (0..<count).shuffled(using: &random)
        var keys: [TimerKey] = []
        keys.reserveCapacity(count)
        let before = residentBytes()
        let clock = ContinuousClock()
        var start = clock.now
        for deadline in first { keys.append(try backend.schedule(.after(deadline), calling: callback)) }
        figures.schedule += clock.now - start
        figures.bytes = max(figures.bytes, residentBytes() - before)
        if gathered {
            let resets = resetOrder.map { (keys[$0], second[$0]) }
            start = clock.now
            for (key, delay) in resets {
                do { try backend.reschedule(key, .after(delay)) } catch { figures.refusedResets += 1 }
            }
            figures.reset += clock.now - start
            let cancels = cancelOrder.map { keys[$0] }
            start = clock.now
            for key in cancels { backend.cancel(key) }
            figures.cancel += clock.now - start
            return
        }
        start = clock.now
        for index in resetOrder {
            do { try backend.reschedule(keys[index], .after(second[index])) } catch { figures.refusedResets += 1 }
        }
        figures.reset += clock.now - start
        start = clock.now
        for index in cancelOrder { backend.cancel(keys[index]) }
        figures.cancel += clock.now - start
    }
#endif

func run() throws {
    let arguments = CommandLine.arguments
    // An argument not understood stops the run: one ignored would time another workload.
    let options = arguments.dropFirst(3)
    guard arguments.count >= 3, let count = Int(arguments[2]), count > 0, options.allSatisfy({ ["keys", "gathered"].contains($0) }) else {
        FileHandle.standardError.write("usage: store-figures manual|epoll N [keys] [gathered]\n".data(using: .utf8)!)
        exit(2)
    }
    let backend: any TimerBackend
    switch arguments[1] {
    case "manual": backend = ManualBackend()
    case "epoll": backend = try EpollBackend()
    default:
        FileHandle.standardError.write("unknown backend \(arguments[1]): manual or epoll\n".data(using: .utf8)!)
        exit(2)
    }
    defer { backend.shutdown() }
    let keys = options.contains("keys")
    let rounds = max(1, 1_000_000 / count)
    var random = Workload(state: 19)
    var figures = Figures()
    for _ in 0..<rounds {
        if keys {
            #if KEYS
                try keyRound(backend, count, &random, &figures)
            #else
                FileHandle.standardError.write("this build has no key path (build with -D KEYS)\n".data(using: .utf8)!)
                exit(2)
            #endif
        } else {
            try handleRound(backend, count, &random, &figures)
        }
    }
    func perOperation(_ total: Duration) -> Double {
        let (seconds, attoseconds) = total.components
        return (Double(seconds) * 1e9 + Double(attoseconds) / 1e9) / Double(rounds * count)
    }
    let bytes = Double(figures.bytes) / Double(count)
    print(
        "{\"schedule\": \(perOperation(figures.schedule)), \"reset\": \(perOperation(figures.reset)), "
            + "\"cancel\": \(perOperation(figures.cancel)), \"bytes\": \(bytes), \"refused_resets\": \(figures.refusedResets)}")
}

try run()
