/// An indexed binary min-heap of timers keyed by their latest permitted fire time, then by
/// a sequence number, so timers with equal deadlines fire in the order they were queued
/// (as SwiftNIO's `ScheduledTask` and libuv's `start_id` do).
///
/// Each timer records its slot (`heapIndex`), so removing an arbitrary timer is O(log n)
/// with no search. Entries are plain data: the key sits beside an unmanaged reference, so
/// sifting compares without touching timer objects and moves without reference counting.
/// The heap owns one retain of every timer it holds, taken in `insert` and given back when
/// the timer leaves (`popTop`, `remove`, `removeAll`).
struct TimerHeap {
    struct Entry {
        var key: UInt64
        var sequence: UInt64
        let timer: Unmanaged<TimerHandle>

        @inline(__always)
        func precedes(_ other: Entry) -> Bool {
            key < other.key || (key == other.key && sequence < other.sequence)
        }
    }

    private var entries: ContiguousArray<Entry> = []

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }
    var topKey: UInt64? { entries.first?.key }
    /// The earliest timer, still owned by the heap.
    var top: (key: UInt64, timer: TimerHandle)? {
        guard let first = entries.first else { return nil }
        return (first.key, first.timer.takeUnretainedValue())
    }

    mutating func insert(_ timer: TimerHandle, key: UInt64, sequence: UInt64) {
        entries.append(Entry(key: key, sequence: sequence, timer: .passRetained(timer)))
        siftUp(from: entries.count - 1)
    }

    /// Removes and returns the earliest timer.
    mutating func popTop() -> TimerHandle? {
        guard !entries.isEmpty else { return nil }
        return remove(at: 0)
    }

    /// Takes `timer` out. The caller holds its own reference, so the heap's is never the last.
    @discardableResult
    mutating func remove(_ timer: TimerHandle) -> Bool {
        let index = Int(timer.heapIndex)
        guard index >= 0, index < entries.count, entries[index].timer.toOpaque() == Unmanaged.passUnretained(timer).toOpaque() else {
            return false
        }
        _ = remove(at: index)
        return true
    }

    /// Moves `timer`, already in the heap, to `key`, queued after every entry of equal key.
    mutating func update(_ timer: TimerHandle, key: UInt64, sequence: UInt64) {
        let index = Int(timer.heapIndex)
        guard index >= 0, index < entries.count else { return }
        let old = entries[index]
        entries[index].key = key
        entries[index].sequence = sequence
        if entries[index].precedes(old) { siftUp(from: index) } else { siftDown(from: index) }
    }

    /// Drops every entry whose timer fails `keep`, then restores heap order in O(n).
    /// Returns the dropped timers so the caller can release them outside its lock.
    mutating func compact(keeping keep: (TimerHandle) -> Bool) -> [TimerHandle] {
        var dropped: [TimerHandle] = []
        var kept = 0
        for index in entries.indices {
            let entry = entries[index]
            if entry.timer._withUnsafeGuaranteedRef(keep) {
                entries[kept] = entry
                kept += 1
            } else {
                let timer = entry.timer.takeRetainedValue()
                timer.heapIndex = -1
                dropped.append(timer)
            }
        }
        entries.removeLast(entries.count - kept)
        entries.withUnsafeMutableBufferPointer { heap in
            for index in heap.indices { Self.place(heap[index], at: index, in: heap) }
        }
        if entries.count > 1 {
            for index in stride(from: entries.count / 2 - 1, through: 0, by: -1) { siftDown(from: index) }
        }
        return dropped
    }

    mutating func removeAll() -> [TimerHandle] {
        let timers = entries.map { $0.timer.takeRetainedValue() }
        for timer in timers { timer.heapIndex = -1 }
        entries.removeAll()
        return timers
    }

    private mutating func remove(at index: Int) -> TimerHandle {
        let removed = entries[index].timer
        let last = entries.removeLast()
        if index < entries.count {
            entries[index] = last
            if index > 0 && last.precedes(entries[(index - 1) / 2]) {
                siftUp(from: index)
            } else {
                siftDown(from: index)
            }
        }
        let timer = removed.takeRetainedValue()
        timer.heapIndex = -1
        return timer
    }

    @inline(__always)
    private static func place(_ entry: Entry, at index: Int, in heap: UnsafeMutableBufferPointer<Entry>) {
        heap[index] = entry
        entry.timer._withUnsafeGuaranteedRef { $0.heapIndex = Int32(truncatingIfNeeded: index) }
    }

    private mutating func siftUp(from start: Int) {
        entries.withUnsafeMutableBufferPointer { heap in
            var index = start
            let moving = heap[index]
            while index > 0 {
                let parent = (index - 1) / 2
                guard moving.precedes(heap[parent]) else { break }
                Self.place(heap[parent], at: index, in: heap)
                index = parent
            }
            Self.place(moving, at: index, in: heap)
        }
    }

    private mutating func siftDown(from start: Int) {
        entries.withUnsafeMutableBufferPointer { heap in
            let count = heap.count
            var index = start
            let moving = heap[index]
            while true {
                var child = 2 * index + 1
                guard child < count else { break }
                if child + 1 < count && heap[child + 1].precedes(heap[child]) { child += 1 }
                guard heap[child].precedes(moving) else { break }
                Self.place(heap[child], at: index, in: heap)
                index = child
            }
            Self.place(moving, at: index, in: heap)
        }
    }
}
