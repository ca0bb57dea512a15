import Glibc
import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// The queue as a plain data structure, with no scheduler and no thread.
@Suite("Timer queue")
struct TimerQueueTests {
    /// Empties `queue` into the order it pops in (an entry's `id` is its slot).
    private func drain(_ queue: inout TimerQueue) -> [(key: UInt64, sequence: UInt64, id: Int)] {
        var popped: [(UInt64, UInt64, Int)] = []
        while let entry = queue.popTop() { popped.append((entry.key, entry.sequence, Int(entry.slot))) }
        return popped
    }

    @Test func popsInKeyThenSequenceOrder() {
        var rng = SplitMix(seed: 7)
        var queue = TimerQueue()
        var expected: [(UInt64, UInt64)] = []
        for sequence in 1...5000 as ClosedRange<UInt64> {
            let key = UInt64(rng.next() % 300)  // many equal keys: the sequence must order them
            _ = queue.insert(UInt32(Int(sequence)), key: key, sequence: sequence)
            expected.append((key, sequence))
            if sequence % 500 == 0 { queue.checkInvariants() }
        }
        let popped = drain(&queue)
        expected.sort { $0.0 < $1.0 || ($0.0 == $1.0 && $0.1 < $1.1) }
        #expect(popped.map(\.key) == expected.map(\.0))
        #expect(popped.map(\.sequence) == expected.map(\.1))
        let isEmpty = queue.isEmpty  // #expect takes copies; the queue is not copyable
        #expect(isEmpty)
    }

    /// Entries live in chunks that never move: the order holds across chunk edges (a parent
    /// in one chunk, its children in the next), and a queue keeps its chunks as it shrinks
    /// (a chunk given back cost a cancel 25-50 µs) and uses them again as it grows.
    @Test func entriesAcrossChunkEdgesKeepTheOrderAndChunksAreKept() {
        var rng = SplitMix(seed: 13)
        var queue = TimerQueue()
        let total = 3 * TimerQueue.chunkSize + 5
        for sequence in 1...UInt64(total) { _ = queue.insert(UInt32(Int(sequence)), key: rng.next() % 10_000, sequence: sequence) }
        let chunksFull = queue.chunkCount
        #expect(chunksFull == 4)
        queue.checkInvariants()
        // Half out, from the top: every chunk stays.
        var keys: [UInt64] = []
        for _ in 0..<(total / 2) {
            keys.append(queue.topKey ?? .max)
            _ = queue.popTop()
        }
        queue.checkInvariants()
        let chunksHalf = queue.chunkCount
        #expect(chunksHalf == 4)
        let rest = drain(&queue)
        keys += rest.map(\.key)
        #expect(keys == keys.sorted())
        #expect(keys.count == total)
        let chunksEmpty = queue.chunkCount
        #expect(chunksEmpty == 4)
        // And the queue grows again into the chunks it kept: no new one is mapped.
        for sequence in 1...UInt64(2 * TimerQueue.chunkSize) { _ = queue.insert(UInt32(Int(sequence)), key: sequence, sequence: sequence) }
        queue.checkInvariants()
        let chunksRegrown = queue.chunkCount
        #expect(chunksRegrown == 4)
        #expect(drain(&queue).map(\.id) == Array(1...2 * TimerQueue.chunkSize))
    }

    /// Growing never copies the entries to a bigger buffer (at a million entries that copy
    /// held the scheduler's lock for milliseconds): where an entry is stored stays put while
    /// the queue grows past many chunks and its table of chunks grows too.
    @Test func growingNeverMovesTheEntries() {
        var queue = TimerQueue()
        // Rising keys: nothing sifts, so entry 0 and the last of the first chunk stay theirs.
        for sequence in 1...UInt64(TimerQueue.chunkSize) { _ = queue.insert(UInt32(Int(sequence)), key: sequence, sequence: sequence) }
        let first = queue.address(of: 0)
        let lastOfFirstChunk = queue.address(of: TimerQueue.chunkSize - 1)
        for sequence in UInt64(TimerQueue.chunkSize + 1)...UInt64(9 * TimerQueue.chunkSize) {
            _ = queue.insert(UInt32(Int(sequence)), key: sequence, sequence: sequence)
        }
        let chunks = queue.chunkCount
        #expect(chunks == 9)  // past the table's first capacity of 4, so the table grew twice
        let (firstAfter, lastAfter) = (queue.address(of: 0), queue.address(of: TimerQueue.chunkSize - 1))
        #expect(firstAfter == first)
        #expect(lastAfter == lastOfFirstChunk)
        _ = drain(&queue)
    }

    /// A chunk is mapped from the kernel, not taken from malloc: glibc's malloc, asked for a
    /// block that size or given one back, first merges every small block the process has freed
    /// since it last did, which held the scheduler's lock for 11-31 ms in a process that had
    /// freed some hundred thousand. Mapped memory starts on a page; a malloc block starts after
    /// malloc's header.
    @Test func chunksAreMappedFromTheKernel() {
        var queue = TimerQueue()
        for sequence in 1...UInt64(3 * TimerQueue.chunkSize) { _ = queue.insert(UInt32(Int(sequence)), key: sequence, sequence: sequence) }
        let page = sysconf(Int32(_SC_PAGESIZE))
        for chunk in 0..<3 {
            let start = queue.address(of: chunk * TimerQueue.chunkSize).map { Int(bitPattern: $0) }
            #expect(start.map { $0 % page == 0 } == true, "chunk \(chunk) starts at \(String(describing: start))")
        }
        _ = drain(&queue)
    }

    @Test func aRefiledTopSinksToItsNewPlace() {
        var queue = TimerQueue()
        for id in 1...10 { _ = queue.insert(UInt32(id), key: UInt64(id) * 10, sequence: UInt64(id)) }
        queue.refileTop(key: 55, sequence: 11)  // item 1 moves from 10 to 55
        queue.checkInvariants()
        #expect(drain(&queue).map(\.id) == [2, 3, 4, 5, 1, 6, 7, 8, 9, 10])
    }

    @Test func aSweepRemovesOnlyDeadEntriesAndKeepsTheOrder() {
        var rng = SplitMix(seed: 11)
        var queue = TimerQueue()
        for id in 0..<2000 { _ = queue.insert(UInt32(id), key: rng.next() % 1_000_000, sequence: UInt64(id + 1)) }
        let isDead: (TimerQueue.Entry) -> Bool = { $0.slot % 3 != 0 }
        var found = 0
        // Bounded work per call: the budget and the limit both hold.
        let first = queue.sweep(budget: 16, limit: 2, isDead: isDead)
        #expect(first <= 2)
        found += first
        while found < 1333 {
            let step = queue.sweep(budget: 16, limit: 4, isDead: isDead)
            #expect(step <= 4)
            found += step
            queue.checkInvariants()
        }
        #expect(found == 1333)
        let rest = drain(&queue)
        #expect(rest.count == 667)
        #expect(Set(rest.map(\.id)) == Set((0..<2000).filter { $0 % 3 == 0 }))
        #expect(zip(rest, rest.dropFirst()).allSatisfy { $0.key <= $1.key })
    }
}

/// A small deterministic generator, so a failure repeats.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
