/// The deadline order of a scheduler's timers: a 4-ary min-heap of entries that carry their
/// own key (latest permitted fire time, then a sequence number, so equal deadlines keep the
/// order they were queued in), so that sifting compares and moves entries without reading or
/// writing a timer. A 4-ary heap is half as deep as a binary one and its four children share
/// a cache line or two, which is what counts with a million entries.
///
/// The queue does not know whether an entry still stands for its element: the scheduler
/// decides that (an entry whose sequence is not its timer's `entrySequence` is dead) and says
/// so through `isDead` where the queue needs it. Dead entries are never searched for: they
/// leave when they reach the top, or a few at a time by `sweep`, which walks the entries from
/// the end (mostly leaves, whose removal moves almost nothing).
///
/// Plain data, with no lock and no thread of its own: tests drive it directly. The queue owns
/// one retain of each entry's element, taken in `insert` and given back with the element by
/// `popTop`, `sweep` and `removeAll`; `deinit` of the owner must empty it first.
struct TimerQueue<Element: AnyObject> {
    struct Entry {
        var key: UInt64
        var sequence: UInt64
        let element: Unmanaged<Element>

        @inline(__always)
        func precedes(_ other: Entry) -> Bool {
            key < other.key || (key == other.key && sequence < other.sequence)
        }
    }

    private var entries: ContiguousArray<Entry> = []
    /// Where the next `sweep` looks, walking down from the end.
    private var sweepCursor = 0

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }
    var topKey: UInt64? { entries.first?.key }
    /// The earliest entry; its element is still owned by the queue.
    var top: Entry? { entries.first }

    mutating func insert(_ element: Element, key: UInt64, sequence: UInt64) {
        entries.append(Entry(key: key, sequence: sequence, element: .passRetained(element)))
        siftUp(from: entries.count - 1)
    }

    /// Removes the earliest entry and returns its element, with the queue's retain.
    mutating func popTop() -> Element? {
        guard !entries.isEmpty else { return nil }
        return remove(at: 0).takeRetainedValue()
    }

    /// Gives the earliest entry a new, later key and sequence and lets it sink to its place:
    /// re-filing a timer whose deadline moved later while it waited.
    mutating func refileTop(key: UInt64, sequence: UInt64) {
        guard !entries.isEmpty else { return }
        entries[0].key = key
        entries[0].sequence = sequence
        siftDown(from: 0)
    }

    /// Looks at up to `budget` entries, walking down from where the last sweep stopped, and
    /// removes those `isDead` says are dead, stopping early once `limit` are removed. The
    /// elements removed are appended to `removed`, with the queue's retains. Returns how many.
    mutating func sweep(
        budget: Int, limit: Int, isDead: (Entry) -> Bool, into removed: inout [Element]
    ) -> Int {
        var looked = 0
        var found = 0
        while looked < budget, found < limit, !entries.isEmpty {
            if sweepCursor >= entries.count || sweepCursor < 0 { sweepCursor = entries.count - 1 }
            looked += 1
            if isDead(entries[sweepCursor]) {
                // What moves into this place is looked at next (it may have come from above).
                removed.append(remove(at: sweepCursor).takeRetainedValue())
                found += 1
            } else {
                sweepCursor -= 1
            }
        }
        return found
    }

    /// Empties the queue and returns every element (an element with several entries appears
    /// once per entry), with the queue's retains.
    mutating func removeAll() -> [Element] {
        defer {
            entries.removeAll()
            sweepCursor = 0
        }
        return entries.map { $0.element.takeRetainedValue() }
    }

    /// How many entries `isLive` says are live with keys at or before `key`: the timers due by
    /// then. Visits only those entries (none below an entry is earlier than it) and their
    /// children. For slow-handler reports, which are rare.
    func countDue(by key: UInt64, isLive: (Entry) -> Bool) -> Int {
        var count = 0
        var stack = [0]
        while let index = stack.popLast() {
            guard index < entries.count, entries[index].key <= key else { continue }
            if isLive(entries[index]) { count += 1 }
            let first = 4 * index + 1
            var child = first
            while child < min(first + 4, entries.count) {
                stack.append(child)
                child += 1
            }
        }
        return count
    }

    /// Gives every entry for which `newKey` returns a key that key, then restores the heap
    /// order: O(n), for the rare change of a clock's offset.
    mutating func rekey(_ newKey: (Entry) -> UInt64?) {
        var changed = false
        for index in entries.indices {
            if let key = newKey(entries[index]) {
                entries[index].key = key
                changed = true
            }
        }
        guard changed, entries.count > 1 else { return }
        for index in stride(from: (entries.count - 2) / 4, through: 0, by: -1) { siftDown(from: index) }
    }

    /// How many entries satisfy `predicate`. O(n): tests only.
    func count(where predicate: (Entry) -> Bool) -> Int {
        entries.reduce(0) { $0 + (predicate($1) ? 1 : 0) }
    }

    /// Traps if the heap order is broken anywhere. Tests and debug builds only: O(n).
    func checkInvariants() {
        for index in entries.indices.dropFirst() {
            let parent = (index - 1) / 4
            precondition(!entries[index].precedes(entries[parent]), "TimerQueue: entry \(index) precedes its parent \(parent)")
        }
    }

    private mutating func remove(at index: Int) -> Unmanaged<Element> {
        let removed = entries[index].element
        let last = entries.removeLast()
        if index < entries.count {
            entries[index] = last
            if index > 0 && last.precedes(entries[(index - 1) / 4]) {
                siftUp(from: index)
            } else {
                siftDown(from: index)
            }
        }
        return removed
    }

    private mutating func siftUp(from start: Int) {
        entries.withUnsafeMutableBufferPointer { heap in
            var index = start
            let moving = heap[index]
            while index > 0 {
                let parent = (index - 1) / 4
                guard moving.precedes(heap[parent]) else { break }
                heap[index] = heap[parent]
                index = parent
            }
            heap[index] = moving
        }
    }

    private mutating func siftDown(from start: Int) {
        entries.withUnsafeMutableBufferPointer { heap in
            let count = heap.count
            var index = start
            let moving = heap[index]
            while true {
                let first = 4 * index + 1
                guard first < count else { break }
                var least = first
                let end = min(first + 4, count)
                var child = first + 1
                while child < end {
                    if heap[child].precedes(heap[least]) { least = child }
                    child += 1
                }
                guard heap[least].precedes(moving) else { break }
                heap[index] = heap[least]
                index = least
            }
            heap[index] = moving
        }
    }
}
