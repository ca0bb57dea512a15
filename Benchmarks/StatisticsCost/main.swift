// What recording statistics costs per fire, measured so that the machine's noise cancels out:
// one Manual backend fires a repeating timer in short rounds, recording statistics in one round
// and not in the next (which comes first alternates), and each pair of rounds gives one
// difference. One backend, not two: two instances differ by where their memory lies, which
// moved a fire by ±10 ns between them, more than recording costs. A p90 per benchmark moves by 10–20 ns from run to run on a shared VM; paired
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

/// Nanoseconds per fire over `fires` fires, recording statistics or not.
@inline(never)
func round(_ backend: ManualBackend, recording: Bool, fires: Int) -> Double {
    backend.scheduler.recordsFireStatistics = recording
    let start = nowNanoseconds()
    for _ in 0..<fires { backend.advance(by: .microseconds(100)) }
    return Double(nowNanoseconds() - start) / Double(fires)
}

let rounds = 4_000
let firesPerRound = 100
do {
    let backend = ManualBackend(registry: TimerRegistry())
    defer { backend.shutdown() }
    try backend.schedule(.every(.microseconds(100))) { _ in }
    for _ in 0..<200 {  // steady state
        _ = round(backend, recording: true, fires: firesPerRound)
        _ = round(backend, recording: false, fires: firesPerRound)
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
            withStatistics = round(backend, recording: true, fires: firesPerRound)
            without = round(backend, recording: false, fires: firesPerRound)
        } else {
            without = round(backend, recording: false, fires: firesPerRound)
            withStatistics = round(backend, recording: true, fires: firesPerRound)
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
