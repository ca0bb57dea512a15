/// What the registry asks of a scheduler: a timer's handle by its slot (a lookup by name),
/// snapshots, and registry-wide cancels, suspends and resumes, each done a chunk of slots at
/// a time under this scheduler's lock only.
extension TimerScheduler {
    /// The handle of the live timer in `slot` of `generation`, made for a timer scheduled with
    /// a key on the first lookup (every later lookup gets the same); nil once it has ended.
    func front(slot: UInt32, generation: UInt32) -> TimerHandle? {
        mutex.withLock {
            // The registry lends a chunk and this store takes it in one critical section of this
            // lock: a slot the registry names is in a chunk the store has.
            // A name may also name a slot this store has not handed out (a generated name's
            // slot and generation are in it): such a slot has no owner.
            guard Int(slot) &>> RecordChunk.shift < store.chunks.count, store[slot].pointee.owner != nil,
                liveRecordLocked(TimerKey(slot: slot, generation: generation, scheduler: serial)) != nil
            else { return nil }
            return frontLocked(slot)
        }
    }

    /// The handle of the timer in `slot` (live).
    func frontLocked(_ slot: UInt32) -> TimerHandle {
        let record = store[slot]
        if record.pointee.callbackKind == 0, let owner = record.pointee.owner { return unsafeDowncast(owner, to: TimerHandle.self) }
        let extras = record.pointee.extras ?? TimerExtras()
        record.pointee.extras = extras
        if let handle = extras.handle { return handle }
        let handle = TimerHandle(scheduler: self, slot: slot, generation: record.pointee.generation, handler: Self.endedHandler)
        extras.handle = handle
        return handle
    }

    /// Whether `timer` is a target-action timer whose target has been released. The target is
    /// loaded outside the lock (see `WeakReference`).
    func hasReleasedTarget(_ timer: TimerKey) -> Bool {
        let target = mutex.withLock { liveRecordLocked(timer)?.pointee.extras?.target }
        guard let target else { return false }
        return target.object == nil
    }

    /// The snapshot of the live timer in `slot`.
    func snapshotLocked(_ slot: UInt32) -> TimerSnapshot {
        let record = store[slot]
        let stats = store.fireStats(slot)
        let fires = record.pointee.fires
        return TimerSnapshot(
            name: nameLocked(slot, generation: record.pointee.generation), backend: backendName, state: record.pointee.state,
            fires: fires,
            nextDeadline: record.pointee.state == .scheduled
                ? MonotonicInstant(nanoseconds: clocks.offsets.monotonic(RepeatRule.dueTime(record.pointee), on: record.pointee.clock))
                : nil,
            interval: record.pointee.interval == 0 ? nil : .nanoseconds(Int64(clamping: record.pointee.interval)),
            lastLateness: fires == 0 ? nil : .nanoseconds(Int64(clamping: stats.lastLateness)),
            maxLateness: fires == 0 ? nil : .nanoseconds(Int64(clamping: stats.maxLateness)), missedTicks: Int(stats.missedTicks))
    }

    /// The snapshot of `timer` while it is live; nil once it has ended.
    func liveSnapshot(of timer: TimerKey) -> TimerSnapshot? {
        mutex.withLock { liveRecordLocked(timer) != nil ? snapshotLocked(timer.slot) : nil }
    }

    /// The one walk over the store: a chunk at a time, `body` runs under the lock with that
    /// chunk's occupied slots and a carrier (run after unlocking), and what it returns goes to
    /// `then`, outside the lock. So a registry-wide operation holds the lock for a chunk at most.
    func forEachChunk<Slice>(
        _ body: (_ slots: [UInt32], _ after: inout AfterUnlock) -> Slice, then: (Slice) -> Void = { _ in }
    ) {
        var chunk = 0
        while true {
            let slice: Slice? = locked { after in
                guard chunk < store.chunks.count else { return nil }
                var slots: [UInt32] = []
                store.forEachOccupied(chunks: chunk..<chunk + 1) { slots.append($0) }
                return body(slots, &after)
            }
            guard let slice else { return }
            then(slice)
            chunk += 1
        }
    }

    /// Calls `body` with the snapshots of the live timers, a chunk of slots at a time (each
    /// taken under the lock, `body` run outside it).
    func forEachSnapshotSlice(_ body: ([TimerSnapshot]) -> Void) {
        forEachChunk({ slots, _ in slots.filter { !store[$0].pointee.state.hasEnded }.map(snapshotLocked) }, then: body)
    }

    /// Ends every live timer (`cancelAll`).
    func endAll(because cause: EndCause) {
        forEachChunk { slots, after in
            for slot in slots { endLocked(slot, because: cause, into: &after) }
        }
    }

    /// Suspends (`suspendAll`) or resumes (`resumeAll`) every live timer.
    func setAll(suspended: Bool) {
        forEachChunk { slots, after in
            for slot in slots {
                let record = store[slot]
                if suspended, record.pointee.state == .scheduled {
                    record.pointee.state = .suspended
                    retireLocked(slot, &after)
                } else if !suspended, record.pointee.state == .suspended, !isShutDown {
                    record.pointee.state = .scheduled
                    guard record.pointee.activeCalls == 0 && (record.pointee.extras?.tasksRunning ?? 0) == 0 else { continue }
                    do throws(TimerError) { try queueLocked(slot, &after) } catch {
                        record.pointee.state = .suspended  // as `resume` leaves it when the driver refuses
                    }
                }
            }
        }
    }

    /// Ends the target-action timers whose target has been released; returns how many. The
    /// targets are loaded outside the lock (see `WeakReference`).
    @discardableResult
    func endTimersOfReleasedTargets() -> Int {
        var ended = 0
        forEachChunk { slots, _ in
            slots.compactMap { slot -> (key: TimerKey, target: WeakReference)? in
                let record = store[slot]
                guard !record.pointee.state.hasEnded, let target = record.pointee.extras?.target else { return nil }
                return (TimerKey(slot: slot, generation: record.pointee.generation, scheduler: serial), target)
            }
        } then: { targets in
            for entry in targets where entry.target.object == nil {
                cancel(entry.key, because: .targetReleased)
                ended += 1
            }
        }
        return ended
    }

    /// Caps this scheduler's live timers (see `TimerBackend/limitLiveTimers(to:)`).
    func limitLiveTimers(to limit: Int?) throws(TimerError) {
        if let limit, limit < 0 { throw .invalidOption(name: "limit", value: "\(limit)", allowed: "0... or nil") }
        mutex.withLock { store.maxLive = limit ?? .max }
    }

    var maxLiveTimers: Int? {
        let limit = mutex.withLock { store.maxLive }
        return limit == .max ? nil : limit
    }

    var refusedByLiveTimerLimit: Int { mutex.withLock { store.refusedByLimit } }
}

extension TimerScheduler {
    /// Where the record of `timer` is stored, for tests that check records never move.
    package func recordAddress(of timer: TimerKey) -> UnsafeRawPointer {
        mutex.withLock { UnsafeRawPointer(store[timer.slot]) }
    }

    /// Whether the live timer `key` names has no extras and `owner` as its callback (tests).
    package func isPlainRecord(_ key: TimerKey, ownedBy owner: AnyObject) -> Bool {
        mutex.withLock {
            guard let record = liveRecordLocked(key) else { return false }
            return record.pointee.extras == nil && record.pointee.owner === owner
        }
    }

    /// Chunks of slots the store holds (tests).
    package var storeChunkCount: Int { mutex.withLock { store.chunks.count } }

    /// The chunks of entries the monotonic queue has mapped (tests).
    package var monotonicQueueChunkCount: Int { mutex.withLock { queues.monotonic.heap.chunkCount } }

    /// The end waiters of `timer` (tests).
    package func endWaiterCount(of timer: TimerKey) -> Int {
        mutex.withLock { liveOrBusyRecordLocked(timer)?.pointee.extras?.endWaiters.count ?? 0 }
    }
}
