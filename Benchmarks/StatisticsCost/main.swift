// What recording statistics costs per fire, measured so that the machine's noise cancels out:
// two Manual backends, one recording and one not, fire the same repeating timer in short
// rounds taken in turns (which goes first alternates), and each pair of rounds gives one
// difference. A p90 per benchmark moves by 10–20 ns from run to run on a shared VM; paired
// rounds see the same noise, so their median difference is what recording costs.
//
// Prints one JSON object: the median difference (ns per fire), its 95 % interval (order
// statistics), and the median time per fire of each. `make bench-check` checks the median.
import Foundation
import Glibc
@_spi(BackendImplementation) import TimerKit

@inline(never)
func nowNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

func backend(recording: Bool) throws -> ManualBackend {
    let backend = ManualBackend(registry: TimerRegistry())
    backend.scheduler.recordsFireStatistics = recording
    try backend.schedule(.every(.microseconds(100))) { _ in }
    backend.advance(by: .milliseconds(10))  // steady state
    return backend
}

/// Nanoseconds per fire over `fires` fires.
@inline(never)
func round(_ backend: ManualBackend, fires: Int) -> Double {
    let start = nowNanoseconds()
    for _ in 0..<fires { backend.advance(by: .microseconds(100)) }
    return Double(nowNanoseconds() - start) / Double(fires)
}

let rounds = 4_000
let firesPerRound = 100
do {
    let on = try backend(recording: true)
    let off = try backend(recording: false)
    defer {
        on.shutdown()
        off.shutdown()
    }
    for _ in 0..<200 {  // warm both
        _ = round(on, fires: firesPerRound)
        _ = round(off, fires: firesPerRound)
    }
    var differences: [Double] = []
    var onTimes: [Double] = []
    var offTimes: [Double] = []
    differences.reserveCapacity(rounds)
    onTimes.reserveCapacity(rounds)
    offTimes.reserveCapacity(rounds)
    for index in 0..<rounds {
        let withStatistics: Double
        let without: Double
        if index % 2 == 0 {
            withStatistics = round(on, fires: firesPerRound)
            without = round(off, fires: firesPerRound)
        } else {
            without = round(off, fires: firesPerRound)
            withStatistics = round(on, fires: firesPerRound)
        }
        differences.append(withStatistics - without)
        onTimes.append(withStatistics)
        offTimes.append(without)
    }
    differences.sort()
    onTimes.sort()
    offTimes.sort()
    // The 95 % interval of a median from order statistics: ranks n/2 ± 1.96·√n/2.
    let spread = Int((1.96 * Double(rounds).squareRoot() / 2).rounded(.up))
    let middle = rounds / 2
    func format(_ value: Double) -> String { String(format: "%.2f", value) }
    print(
        """
        {"rounds": \(rounds), "firesPerRound": \(firesPerRound), \
        "medianDifferenceNs": \(format(differences[middle])), \
        "differenceLowNs": \(format(differences[middle - spread])), "differenceHighNs": \(format(differences[middle + spread])), \
        "medianWithNs": \(format(onTimes[middle])), "medianWithoutNs": \(format(offTimes[middle]))}
        """)
} catch {
    FileHandle.standardError.write(Data("statistics-cost: \(error)\n".utf8))
    exit(1)
}
