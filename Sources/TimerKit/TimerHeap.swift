/// An indexed binary min-heap of timers keyed by their latest permitted fire time.
///
/// Each timer records its slot (`heapIndex`), so removing an arbitrary timer is O(log n)
/// with no search. The key sits in the entry beside the reference so that sifting
/// compares without touching the timer objects.
struct TimerHeap {
    struct Entry {
        var key: UInt64
        let timer: TimerHandle
    }

    private(set) var entries: ContiguousArray<Entry> = []

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }
    var top: Entry? { entries.first }

    mutating func insert(_ timer: TimerHandle, key: UInt64) {
        entries.append(Entry(key: key, timer: timer))
        siftUp(from: entries.count - 1)
    }

    /// Removes and returns the earliest timer.
    mutating func popTop() -> TimerHandle? {
        guard !entries.isEmpty else { return nil }
        return remove(at: 0)
    }

    @discardableResult
    mutating func remove(_ timer: TimerHandle) -> Bool {
        let index = Int(timer.heapIndex)
        guard index >= 0, index < entries.count, entries[index].timer === timer else { return false }
        _ = remove(at: index)
        return true
    }

    mutating func removeAll() -> [TimerHandle] {
        let timers = entries.map(\.timer)
        for timer in timers { timer.heapIndex = -1 }
        entries.removeAll()
        return timers
    }

    private mutating func remove(at index: Int) -> TimerHandle {
        let removed = entries[index].timer
        removed.heapIndex = -1
        let last = entries.removeLast()
        if index < entries.count {
            entries[index] = last
            last.timer.heapIndex = Int32(index)
            if index > 0 && last.key < entries[(index - 1) / 2].key {
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
                let parent = (index - 1) / 2
                guard moving.key < heap[parent].key else { break }
                heap[index] = heap[parent]
                heap[index].timer.heapIndex = Int32(index)
                index = parent
            }
            heap[index] = moving
            moving.timer.heapIndex = Int32(index)
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
                if child + 1 < count && heap[child + 1].key < heap[child].key { child += 1 }
                guard heap[child].key < moving.key else { break }
                heap[index] = heap[child]
                heap[index].timer.heapIndex = Int32(index)
                index = child
            }
            heap[index] = moving
            moving.timer.heapIndex = Int32(index)
        }
    }
}
