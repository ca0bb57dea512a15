/// The timers of one clock waiting to fire, in deadline order on that clock, and the count of
/// their dead entries.
///
/// An entry dies when its timer stops waiting for it: the timer was cancelled, finished,
/// suspended, or moved earlier (a later move keeps the entry, re-filed when it reaches the
/// top). Dying only marks it (`TimerHandle.entrySequence` no longer matches), so a cancel
/// touches its own timer and nothing else; `entryDied` is the one place that pays for that,
/// by dropping dead entries at the top and sweeping a few elsewhere, which keeps dead entries
/// at most one more than live ones after every operation.
///
/// Releasing the queue's references here, under the scheduler's lock, is safe: a live timer is
/// also held by the registry, and an ended one holds nothing of the user's (`TimerScheduler`'s
/// overview).
struct ClockQueue: ~Copyable {
    var heap = TimerQueue<TimerHandle>()
    private(set) var dead = 0

    /// Entries that stand for their timer.
    var live: Int { heap.count - dead }

    @inline(__always)
    static func isDead(_ entry: TimerQueue<TimerHandle>.Entry) -> Bool {
        entry.element._withUnsafeGuaranteedRef { $0.entrySequence != entry.sequence }
    }

    mutating func insert(_ timer: TimerHandle, key: UInt64, sequence: UInt64) {
        heap.insert(timer, key: key, sequence: sequence)
    }

    /// The entry `sequence` no longer stands for its timer (whose `entrySequence` the caller
    /// has already changed). Below three dead entries for four live ones that costs nothing
    /// more; above, each death pays for sweeping up to two (looking at 16 entries), so dead
    /// entries fall back faster than they come; and if they ever reach one more than the live
    /// ones, it sweeps until they do not.
    mutating func entryDied(sequence: UInt64) {
        dead += 1
        if heap.top?.sequence == sequence {
            dropDeadTops()
        } else if dead * 4 > live * 3 {
            dead -= heap.sweep(budget: 16, limit: 2, isDead: Self.isDead)
        }
        keepDeadWithinBound()
    }

    /// Sweeps until dead entries are at most one more than live ones: after a death that the
    /// bounded sweep did not make up for, or after live entries left (fired).
    @inline(__always)
    mutating func keepDeadWithinBound() {
        while dead > live + 1 { dead -= heap.sweep(budget: 64, limit: dead - live - 1, isDead: Self.isDead) }
    }

    /// Drops dead entries at the top, so that the earliest entry is live.
    mutating func dropDeadTops() {
        while let top = heap.top, Self.isDead(top) {
            dead -= 1
            _ = heap.popTop()
        }
    }

    /// Takes the live entry at the top out (the caller has checked it is live), with the
    /// queue's reference to its timer; dead entries left behind stay within their bound.
    mutating func popLiveTop() -> TimerHandle? {
        let timer = heap.popTop()
        keepDeadWithinBound()
        return timer
    }

    /// Removes up to `limit` entries, dead or live (a shutdown, a slice at a time); their
    /// timers are left with no entry. Returns whether any are left.
    mutating func removeSome(_ limit: Int) -> Bool {
        var deadRemoved = 0
        _ = heap.removeLast(upTo: limit) { entry in
            entry.element._withUnsafeGuaranteedRef { timer in
                if timer.entrySequence == entry.sequence { timer.entrySequence = 0 } else { deadRemoved += 1 }
            }
        }
        dead -= deadRemoved
        return !heap.isEmpty
    }

    /// Traps if the counts or the order are wrong: the dead entries at most one more than the
    /// live ones, the heap in order. The order is checked in full for small queues and near the
    /// top for big ones, so that a debug build can check after every operation.
    func checkInvariants() {
        precondition(dead >= 0 && dead <= heap.count, "ClockQueue: \(dead) dead entries in \(heap.count)")
        precondition(dead <= live + 1, "ClockQueue: \(dead) dead entries for \(live) live ones")
        if heap.count <= 16 {
            heap.checkInvariants()
            let counted = heap.count(where: Self.isDead)
            precondition(counted == dead, "ClockQueue: \(counted) dead entries, \(dead) counted")
        } else {
            heap.checkInvariants(upTo: 5)
        }
    }
}

/// A scheduler's three queues, one per clock, each keyed on its own clock (as systemd's
/// sd-event keeps one per clock): a step of the wall clock or a suspend changes no key, only
/// when the one native wake-up is due.
struct ClockQueues: ~Copyable {
    var monotonic = ClockQueue()
    var continuous = ClockQueue()
    var wall = ClockQueue()

    @inline(__always)
    mutating func with<R>(_ clock: DeadlineClock, _ body: (inout ClockQueue) -> R) -> R {
        switch clock {
        case .monotonic: body(&monotonic)
        case .continuous: body(&continuous)
        case .wall: body(&wall)
        }
    }

    @inline(__always)
    func read<R>(_ clock: DeadlineClock, _ body: (borrowing ClockQueue) -> R) -> R {
        switch clock {
        case .monotonic: body(monotonic)
        case .continuous: body(continuous)
        case .wall: body(wall)
        }
    }

    /// Whether no entry waits on the continuous or wall clock: the common case, in which
    /// nothing reads those clocks.
    var onlyMonotonic: Bool { continuous.heap.isEmpty && wall.heap.isEmpty }

    var isEmpty: Bool { monotonic.heap.isEmpty && onlyMonotonic }

    /// Live entries in all three.
    var live: Int { monotonic.live + continuous.live + wall.live }

    /// Dead entries in all three.
    var dead: Int { monotonic.dead + continuous.dead + wall.dead }

    func checkInvariants() {
        monotonic.checkInvariants()
        continuous.checkInvariants()
        wall.checkInvariants()
    }
}
