import Glibc

/// The deadline order of a scheduler's timers: a 4-ary min-heap of entries that carry their
/// own key (latest permitted fire time, then a sequence number, so equal deadlines keep the
/// order they were queued in), so that sifting compares and moves entries without reading or
/// writing a timer. A 4-ary heap is half as deep as a binary one and its four children share
/// a cache line or two, which is what counts with a million entries.
///
/// The queue does not know whether an entry still stands for its timer: the scheduler
/// decides that (an entry whose sequence is not its timer's `entrySequence` is dead) and says
/// so through `isDead` where the queue needs it. Dead entries are never searched for: they
/// leave when they reach the top, or a few at a time by `sweep`, which walks the entries from
/// the end (mostly leaves, whose removal moves almost nothing).
///
/// The entries live in chunks of 4,096 that never move: growing adds a chunk (and now and then
/// copies the small table of chunk addresses), so no insert copies the queue to a bigger
/// buffer under the scheduler's lock (a million entries are 24 MB: several ms to copy). A
/// chunk (96 KB) is mapped from the kernel, not taken from malloc: glibc's malloc, asked for a
/// block that size or given one back, first merges every small block the process has freed
/// since it last did (its fastbins), which took 11-31 ms, under the scheduler's lock, in a
/// process whose other code had freed some hundred thousand small blocks.
///
/// A queue keeps the chunks it grew to until it goes, as its scheduler keeps its records'
/// chunks: giving one back (`munmap`) took 25-50 µs in a process holding a million timers,
/// paid under the lock by the cancel that shrank the queue past a chunk's edge, once every
/// 2,341 cancels while a million timers were cancelled. A queue that grows again uses them.
///
/// Plain data, with no lock and no thread of its own: tests drive it directly. An entry names
/// its timer by slot number (`TimerStore`), so filing, moving and dropping entries touches no
/// reference count.
struct TimerQueue: ~Copyable {
    struct Entry {
        var key: UInt64
        var sequence: UInt64
        let slot: UInt32

        @inline(__always)
        func precedes(_ other: Entry) -> Bool {
            key < other.key || (key == other.key && sequence < other.sequence)
        }
    }

    private static var chunkShift: Int { 12 }
    static var chunkSize: Int { 1 << chunkShift }
    private static var chunkMask: Int { chunkSize - 1 }

    /// The chunks' addresses (`chunkCount` of them, room for `tableCapacity`).
    private var chunks: UnsafeMutablePointer<UnsafeMutablePointer<Entry>>
    private var tableCapacity = 4
    private(set) var chunkCount = 0
    private(set) var count = 0
    /// Where the next `sweep` looks, walking down from the end.
    private var sweepCursor = 0

    init() {
        chunks = .allocate(capacity: tableCapacity)
    }

    deinit {
        for index in 0..<chunkCount { Self.unmap(chunks[index]) }
        chunks.deallocate()
    }

    private static var chunkBytes: Int { chunkSize * MemoryLayout<Entry>.stride }

    /// A chunk's memory, zeroed, from the kernel; nil when none can be had (`errno` says why).
    private static func mapChunk() -> UnsafeMutablePointer<Entry>? {
        let memory = mmap(nil, chunkBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let memory, memory != MAP_FAILED else { return nil }
        return memory.bindMemory(to: Entry.self, capacity: chunkSize)
    }

    private static func unmap(_ chunk: UnsafeMutablePointer<Entry>) {
        munmap(UnsafeMutableRawPointer(chunk), chunkBytes)
    }

    var isEmpty: Bool { count == 0 }
    var topKey: UInt64? { count == 0 ? nil : entry(0).pointee.key }
    /// The earliest entry.
    var top: Entry? { count == 0 ? nil : entry(0).pointee }

    /// Where entry `index` is stored.
    @inline(__always)
    private func entry(_ index: Int) -> UnsafeMutablePointer<Entry> {
        chunks[index &>> Self.chunkShift] + (index & Self.chunkMask)
    }

    /// Files a new entry. Returns false, changing nothing, when the queue needs a chunk and the
    /// kernel has no memory for it (`errno` says why).
    mutating func insert(_ slot: UInt32, key: UInt64, sequence: UInt64) -> Bool {
        guard hasRoom || addChunk() else { return false }
        insert(intoRoom: slot, key: key, sequence: sequence)
        return true
    }

    /// Whether an entry fits in the chunks the queue has.
    var hasRoom: Bool { count < chunkCount &<< Self.chunkShift }

    /// Files a new entry where `hasRoom` (the caller checked).
    @inline(__always)
    mutating func insert(intoRoom slot: UInt32, key: UInt64, sequence: UInt64) {
        count += 1
        siftUp(Entry(key: key, sequence: sequence, slot: slot), intoHoleAt: count - 1)
    }

    /// Maps the first chunk if the queue has none (see `TimerScheduler.prepareStoreLocked`).
    mutating func mapFirstChunk() {
        if chunkCount == 0 { _ = addChunk() }
    }

    private mutating func addChunk() -> Bool {
        guard let chunk = Self.mapChunk() else { return false }
        if chunkCount == tableCapacity {
            let larger = UnsafeMutablePointer<UnsafeMutablePointer<Entry>>.allocate(capacity: tableCapacity * 2)
            larger.moveInitialize(from: chunks, count: chunkCount)
            chunks.deallocate()
            chunks = larger
            tableCapacity *= 2
        }
        chunks[chunkCount] = chunk
        chunkCount += 1
        return true
    }

    /// Takes the last entry out; its chunk stays mapped (see the type).
    private mutating func removeLast() -> Entry {
        count -= 1
        return entry(count).move()
    }

    /// Removes the earliest entry and returns it.
    @discardableResult
    mutating func popTop() -> Entry? {
        guard count > 0 else { return nil }
        return remove(at: 0)
    }

    /// Puts a new entry in the earliest one's place and lets it sink to its own: an insert that
    /// reuses the place of an earliest entry that is dead (one sift instead of a removal and an
    /// insert). The queue must not be empty.
    mutating func replaceTop(_ slot: UInt32, key: UInt64, sequence: UInt64) {
        entry(0).pointee = Entry(key: key, sequence: sequence, slot: slot)
        siftDown(from: 0)
    }

    /// Gives the earliest entry a new, later key and sequence and lets it sink to its place:
    /// re-filing a timer whose deadline moved later while it waited.
    mutating func refileTop(key: UInt64, sequence: UInt64) {
        guard count > 0 else { return }
        entry(0).pointee.key = key
        entry(0).pointee.sequence = sequence
        siftDown(from: 0)
    }

    /// Looks at up to `budget` entries, walking down from where the last sweep stopped, and
    /// removes those `isDead` says are dead, stopping early once `limit` are removed. Returns
    /// how many it removed.
    mutating func sweep(budget: Int, limit: Int, isDead: (Entry) -> Bool) -> Int {
        var looked = 0
        var found = 0
        while looked < budget, found < limit, count > 0 {
            if sweepCursor >= count || sweepCursor < 0 { sweepCursor = count - 1 }
            looked += 1
            if isDead(entry(sweepCursor).pointee) {
                // What moves into this place is looked at next (it may have come from above).
                remove(at: sweepCursor)
                found += 1
            } else {
                sweepCursor -= 1
            }
        }
        return found
    }

    /// Removes up to `limit` entries from the end (which keeps the heap order) and shows each to
    /// `visit`; returns how many it removed. A queue emptied this way a slice at a time never
    /// holds its owner's lock for long.
    mutating func removeLast(upTo limit: Int, _ visit: (Entry) -> Void = { _ in }) -> Int {
        let removed = Swift.min(limit, count)
        for _ in 0..<removed {
            visit(removeLast())
        }
        if count == 0 { sweepCursor = 0 }
        return removed
    }

    /// Empties the queue and returns every entry, in no particular order.
    mutating func removeAll() -> [Entry] {
        var entries: [Entry] = []
        entries.reserveCapacity(count)
        while count > 0 { entries.append(removeLast()) }
        sweepCursor = 0
        return entries
    }

    /// Calls `body` with every entry whose key is at or before `key`. Visits only those entries
    /// (none below an entry is earlier than it) and their children. For slow-handler reports,
    /// once per wake-up that has any.
    func forEachEntry(keyedAtOrBefore key: UInt64, _ body: (Entry) -> Void) {
        guard count > 0 else { return }
        var stack = [0]
        while let index = stack.popLast() {
            guard entry(index).pointee.key <= key else { continue }
            body(entry(index).pointee)
            let first = 4 * index + 1
            var child = first
            while child < Swift.min(first + 4, count) {
                stack.append(child)
                child += 1
            }
        }
    }

    /// Where entry `index` is stored, for tests that check entries never move.
    func address(of index: Int) -> UnsafeRawPointer? {
        index < count ? UnsafeRawPointer(entry(index)) : nil
    }

    /// How many entries satisfy `predicate`. O(n): tests only.
    func count(where predicate: (Entry) -> Bool) -> Int {
        (0..<count).reduce(0) { $0 + (predicate(entry($1).pointee) ? 1 : 0) }
    }

    /// Traps if the heap order is broken among the first `limit` entries (all by default).
    /// Tests and debug builds only: O(min(n, limit)).
    func checkInvariants(upTo limit: Int = .max) {
        for index in (0..<Swift.min(count, limit)).dropFirst() {
            let parent = (index - 1) / 4
            precondition(!entry(index).pointee.precedes(entry(parent).pointee), "TimerQueue: entry \(index) precedes its parent \(parent)")
        }
        precondition(chunkCount &<< Self.chunkShift >= count, "TimerQueue: \(chunkCount) chunks for \(count) entries")
    }

    @discardableResult
    private mutating func remove(at index: Int) -> Entry {
        let removed = entry(index).pointee
        let last = removeLast()
        if index < count {
            entry(index).pointee = last
            if index > 0 && last.precedes(entry((index - 1) / 4).pointee) {
                siftUp(from: index)
            } else {
                siftDown(from: index)
            }
        }
        return removed
    }

    private mutating func siftUp(from start: Int) {
        siftUp(entry(start).pointee, intoHoleAt: start)
    }

    /// Files `moving` at `start` or above it, moving the entries it precedes down: `start` is a
    /// place whose entry the caller has taken out, or a new one at the end (an entry is plain
    /// data: writing one over memory never written needs no initialization).
    private mutating func siftUp(_ moving: Entry, intoHoleAt start: Int) {
        var index = start
        while index > 0 {
            let parent = (index - 1) / 4
            let above = entry(parent).pointee
            guard moving.precedes(above) else { break }
            entry(index).pointee = above
            index = parent
        }
        entry(index).pointee = moving
    }

    private mutating func siftDown(from start: Int) {
        var index = start
        let moving = entry(index).pointee
        while true {
            let first = 4 * index + 1
            guard first < count else { break }
            var least = first
            var leastEntry = entry(first).pointee
            let end = min(first + 4, count)
            var child = first + 1
            while child < end {
                let candidate = entry(child).pointee
                if candidate.precedes(leastEntry) {
                    least = child
                    leastEntry = candidate
                }
                child += 1
            }
            guard leastEntry.precedes(moving) else { break }
            entry(index).pointee = leastEntry
            index = least
        }
        entry(index).pointee = moving
    }
}
