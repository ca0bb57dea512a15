/// The timers of one clock waiting to fire, in deadline order on that clock, and the count of
/// their dead entries.
///
/// An entry dies when its timer stops waiting for it: the timer was cancelled, finished,
/// suspended, or moved earlier (a later move keeps the entry, re-filed when it reaches the
/// top). Dying only marks it (`TimerRecord.entrySequence` no longer matches), so a cancel
/// touches its own record and nothing else; `entryDied` is the one place that pays for that,
/// by dropping dead entries at the top and sweeping a few elsewhere, which keeps dead entries
/// at most one more than live ones after every operation.
///
/// A fire is the one place a dead entry stays at the top: its timer is taken out to fire and its
/// entry left where it is (`entryLeftDeadAtTop`), so that the repeat's next tick, queued when
/// the call returns, takes that place with one sift (`insert`) instead of a removal and an
/// insert. Until then the top's key may be a due one; the fire loop drops the entry if nothing
/// takes its place before it looks for the next due timer.
struct ClockQueue: ~Copyable {
    var heap = TimerQueue()
    private(set) var dead = 0
    /// A fire left its timer's entry at the top, dead (`entryLeftDeadAtTop`): the next insert
    /// looks whether the top is still dead, to take its place. A hint: the insert checks.
    private var firedTopMayBeDead = false
    /// A shutdown is emptying the queue from its end (`removeSome`), a slice at a time, and
    /// nothing is queued any more: the dead entries it has not reached yet may outnumber the
    /// live ones, and no sweep runs for them (the drain takes every entry). Between two slices
    /// other calls may still end or suspend timers, whose entries die as usual.
    var isDraining = false

    /// Entries that stand for their timer.
    var live: Int { heap.count - dead }

    @inline(__always)
    static func isDead(_ entry: TimerQueue.Entry, in store: RecordTable) -> Bool {
        store[entry.slot].pointee.entrySequence != entry.sequence
    }

    /// Files a new entry. Where a fire left the earliest entry dead (`entryLeftDeadAtTop`) and
    /// it still is, the new one takes its place: a repeat's next tick, queued when its call
    /// returns, re-files its entry in place.
    /// Returns false, changing nothing, when the queue needs memory and gets none.
    @inline(__always)
    mutating func insert(_ slot: UInt32, key: UInt64, sequence: UInt64, in store: RecordTable) -> Bool {
        if !tookDeadTop(slot, key: key, sequence: sequence, in: store) {
            guard heap.insert(slot, key: key, sequence: sequence) else { return false }
        }
        return true
    }

    /// `insert`, where the caller has seen `heap.hasRoom`: it cannot fail.
    @inline(__always)
    mutating func insert(intoRoom slot: UInt32, key: UInt64, sequence: UInt64, in store: RecordTable) {
        if !tookDeadTop(slot, key: key, sequence: sequence, in: store) { heap.insert(intoRoom: slot, key: key, sequence: sequence) }
    }

    /// Files the new entry in the place of the earliest one if a fire left that dead
    /// (`entryLeftDeadAtTop`) and it still is; returns whether it did. Either way the hint is
    /// used up.
    @inline(__always)
    private mutating func tookDeadTop(_ slot: UInt32, key: UInt64, sequence: UInt64, in store: RecordTable) -> Bool {
        defer { firedTopMayBeDead = false }
        guard firedTopMayBeDead, let top = heap.top, Self.isDead(top, in: store) else { return false }
        heap.replaceTop(slot, key: key, sequence: sequence)
        dead -= 1
        return true
    }

    /// The entry `sequence` no longer stands for its timer (whose `entrySequence` the caller
    /// has already changed). Below three dead entries for four live ones that costs nothing
    /// more; above, each death pays for sweeping up to two (looking at 16 entries), so dead
    /// entries fall back faster than they come; and if they ever reach one more than the live
    /// ones, it sweeps until they do not.
    @inline(__always)
    mutating func entryDied(sequence: UInt64, in store: RecordTable) {
        dead += 1
        if heap.top?.sequence == sequence {
            dropDeadTops(in: store)
        } else if dead * 4 > live * 3 {
            sweepSome(in: store)
        }
        keepDeadWithinBound(in: store)
    }

    /// The bounded sweep of a death (see `entryDied`). Out of line, so that the paths that end
    /// a timer stay short enough to be inlined where dead entries are few.
    @inline(never)
    private mutating func sweepSome(in store: RecordTable) {
        guard !isDraining else { return }
        dead -= heap.sweep(budget: 16, limit: 2) { Self.isDead($0, in: store) }
    }

    /// Sweeps until dead entries are at most one more than live ones: after a death that the
    /// bounded sweep did not make up for, or after live entries left (fired).
    @inline(__always)
    mutating func keepDeadWithinBound(in store: RecordTable) {
        if dead > live + 1 { sweepToBound(in: store) }
    }

    @inline(never)
    private mutating func sweepToBound(in store: RecordTable) {
        guard !isDraining else { return }
        while dead > live + 1 {
            dead -= heap.sweep(budget: 64, limit: dead - live - 1) { Self.isDead($0, in: store) }
        }
    }

    /// Drops dead entries at the top, so that the earliest entry is live.
    mutating func dropDeadTops(in store: RecordTable) {
        while let top = heap.top, Self.isDead(top, in: store) {
            dead -= 1
            heap.popTop()
        }
    }

    /// Counts the entry at the top dead: its timer, due, was taken out to fire (the caller has set
    /// its `entrySequence` to 0); dead entries stay within their bound.
    @inline(__always)
    mutating func entryLeftDeadAtTop(in store: RecordTable) {
        dead += 1
        firedTopMayBeDead = true
        keepDeadWithinBound(in: store)
    }

    /// Removes up to `limit` entries, dead or live, from the end (which keeps the heap order):
    /// a shutdown empties the queue a slice at a time (`isDraining`). Their timers are left with
    /// no entry. Returns whether any are left.
    mutating func removeSome(_ limit: Int, in store: RecordTable) -> Bool {
        var deadRemoved = 0
        _ = heap.removeLast(upTo: limit) { entry in
            let record = store[entry.slot]
            if record.pointee.entrySequence == entry.sequence { record.pointee.entrySequence = 0 } else { deadRemoved += 1 }
        }
        dead -= deadRemoved
        return !heap.isEmpty
    }

    /// Traps if the counts or the order are wrong: the dead entries at most one more than the
    /// live ones, the heap in order. The order is checked in full for small queues and near the
    /// top for big ones, so that a debug build can check after every operation.
    func checkInvariants(in store: RecordTable) {
        precondition(dead >= 0 && dead <= heap.count, "ClockQueue: \(dead) dead entries in \(heap.count)")
        precondition(isDraining || dead <= live + 1, "ClockQueue: \(dead) dead entries for \(live) live ones")
        if heap.count <= 16 {
            heap.checkInvariants()
            let counted = heap.count { Self.isDead($0, in: store) }
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

    /// A shutdown begins to empty the queues (`ClockQueue.isDraining`).
    mutating func beginDraining() {
        monotonic.isDraining = true
        continuous.isDraining = true
        wall.isDraining = true
    }

    func checkInvariants(in store: RecordTable) {
        monotonic.checkInvariants(in: store)
        continuous.checkInvariants(in: store)
        wall.checkInvariants(in: store)
    }
}
