import Glibc

/// Where each timer waits: adding a timer to the store and its clock's queue, the one place a
/// queue entry dies, and arming the driver for the earliest wake-up across the clocks'
/// queues. Also the jitter each fire is drawn. All under `mutex`.
extension TimerScheduler {
    /// What few timers have besides a schedule, a policy and what they call: when none of it is
    /// given, a timer needs no `TimerExtras`.
    struct TimerOptions {
        var name: String?
        var tolerance: UInt64 = 0
        var target: WeakReference?
        var startSuspended = false
        var runsTasks = false
        var helper: AnyObject?
    }

    /// Checks and resolves a schedule (outside the lock: no shared state is read but the clock).
    @inline(__always)
    func resolve(_ schedule: TimerSchedule, name: String?, tolerance: Duration) throws(TimerError) -> TimerSchedule.Resolved {
        if tolerance.isNegative { throw .negativeDuration(parameter: "tolerance", value: tolerance) }
        if let name { try TimerRegistry.validate(name: name) }
        return try resolve(schedule)
    }

    /// Resolves a schedule for a new timer at the current reading of its clock (outside the
    /// lock), refusing it once the backend shuts down.
    @inline(__always)
    func resolve(_ schedule: TimerSchedule) throws(TimerError) -> TimerSchedule.Resolved {
        if shutDownFlag.load(ordering: .relaxed) { throw mutex.withLock { shutDownErrorLocked() } }
        return try resolveNow(schedule)
    }

    /// Resolves a schedule at the current reading of its clock (outside the lock). Checks
    /// nothing of the backend's state: a reschedule checks under the lock (an ended timer's
    /// error comes before the shutdown's).
    @inline(__always)
    func resolveNow(_ schedule: TimerSchedule) throws(TimerError) -> TimerSchedule.Resolved {
        try schedule.resolve(ownNow: now(of: schedule.clock, monotonic: clock.now().nanoseconds))
    }

    /// Registers and queues a timer called through its handle. `startSuspended` registers it
    /// suspended (a `ticks` sequence resumes it when its consumer asks); `runsTasks` marks a
    /// `scheduleAsync` timer.
    func schedule(
        _ schedule: TimerSchedule, name: String?, tolerance: Duration, policy: MissedTickPolicy,
        target: WeakReference?, startSuspended: Bool = false, runsTasks: Bool = false,
        helper: AnyObject? = nil, handler: @escaping @Sendable (Tick) -> Void
    ) throws(TimerError) -> TimerHandle {
        if name == nil, target == nil, !startSuspended, !runsTasks, helper == nil, let deadline = timeoutDeadline(schedule, tolerance) {
            let handle = TimerHandle(scheduler: self, handler: handler)
            let owner = Unmanaged<AnyObject>.passRetained(handle)
            let placing = Unmanaged.passUnretained(handle)
            if try addTimeout(deadline: deadline, policy: policy, owner: owner, kind: 0, placing: placing) != nil { return handle }
            // Not added (nothing saw the handle): the general path makes its own.
            owner.release()
        }
        return try scheduleInFull(
            schedule, name: name, tolerance: tolerance, policy: policy, target: target, startSuspended: startSuspended,
            runsTasks: runsTasks, helper: helper, handler: handler)
    }

    /// `schedule(_:name:tolerance:policy:target:startSuspended:runsTasks:helper:handler:)` for
    /// any timer. Out of line, so that a timeout's path keeps to a short function.
    @inline(never)
    private func scheduleInFull(
        _ schedule: TimerSchedule, name: String?, tolerance: Duration, policy: MissedTickPolicy,
        target: WeakReference?, startSuspended: Bool, runsTasks: Bool, helper: AnyObject?,
        handler: @escaping @Sendable (Tick) -> Void
    ) throws(TimerError) -> TimerHandle {
        let resolved = try resolve(schedule, name: name, tolerance: tolerance)
        var options: TimerOptions?
        if name != nil || !tolerance.isZero || target != nil || startSuspended || runsTasks || helper != nil {
            options = TimerOptions(
                name: name, tolerance: UInt64(tolerance.saturatingNanoseconds), target: target, startSuspended: startSuspended,
                runsTasks: runsTasks, helper: helper)
        }
        var handle: TimerHandle?
        // The closure captures the scheduler unretained: a captured reference would be
        // retained for the closure's context and released after the call.
        let unretainedSelf = Unmanaged.passUnretained(self)
        try add(resolved, calendar: schedule.calendarRule, policy: policy, options: options) { slot, generation throws(TimerError) in
            try unretainedSelf.withBorrowed { scheduler throws(TimerError) in
                let made = TimerHandle(scheduler: scheduler, slot: slot, generation: generation, handler: handler)
                handle = made
                guard scheduler.handlesAsKeyedTimers else { return (.passRetained(made), 0) }
                let kind = try scheduler.callbackKinds.kindLocked(of: HandleCallback.self)
                let extras = scheduler.store[slot].pointee.extras ?? TimerExtras()
                extras.handle = made
                scheduler.store[slot].pointee.extras = extras
                return (.passRetained(HandleCallback(made)), kind)
            }
        }
        // `add` returned: it made the handle.
        guard let handle else { throw .backendShutDown(backend: backendName) }
        return handle
    }

    /// For checks of the key path: when set, a timer scheduled with a handler is kept as a timer
    /// scheduled with a key, whose callback calls the handler (its handle still answers for
    /// it), so that a suite written against handles runs through what the key path runs: calls
    /// through `TimerCallback`, `timerEnded`, the end of a timer whose owner is a callback.
    /// Applies to timers scheduled after it is set.
    @_spi(BackendImplementation) public var keepsHandlesAsKeyedTimers: Bool {
        get { mutex.withLock { handlesAsKeyedTimers } }
        set { mutex.withLock { handlesAsKeyedTimers = newValue } }
    }

    /// The kind of `type` (`CallbackKinds`): found without the lock once a timer has had it.
    @inline(__always)
    func callbackKind(of type: any TimerCallback.Type) throws(TimerError) -> UInt8 {
        if let kind = callbackKinds.existingKind(of: type) { return kind }
        return try mutex.withLock { () throws(TimerError) in try callbackKinds.kindLocked(of: type) }
    }

    /// Registers and queues a timer that calls `callback`, of type `type`, and returns its key.
    func schedule(
        _ schedule: TimerSchedule, name: String?, tolerance: Duration, policy: MissedTickPolicy, calling callback: AnyObject,
        of type: any TimerCallback.Type
    ) throws(TimerError) -> TimerKey {
        let kind = try callbackKind(of: type)
        if name == nil, let deadline = timeoutDeadline(schedule, tolerance) {
            let owner = Unmanaged.passRetained(callback)
            if let (slot, generation) = try addTimeout(deadline: deadline, policy: policy, owner: owner, kind: kind, placing: nil) {
                return TimerKey(slot: slot, generation: generation, scheduler: serial)
            }
            owner.release()
        }
        return try scheduleInFull(schedule, name: name, tolerance: tolerance, policy: policy, calling: callback, kind: kind)
    }

    /// `schedule(_:name:tolerance:policy:calling:kind:)` for any timer. Out of line, so that a
    /// timeout's path keeps to a short function.
    @inline(never)
    private func scheduleInFull(
        _ schedule: TimerSchedule, name: String?, tolerance: Duration, policy: MissedTickPolicy, calling callback: AnyObject,
        kind: UInt8
    ) throws(TimerError) -> TimerKey {
        // The closure captures the callback unretained: a captured reference would be retained
        // for the closure's context and released after the call (two calls to the runtime).
        let unretained = Unmanaged.passUnretained(callback)
        let resolved = try resolve(schedule, name: name, tolerance: tolerance)
        var options: TimerOptions?
        if name != nil || !tolerance.isZero { options = TimerOptions(name: name, tolerance: UInt64(tolerance.saturatingNanoseconds)) }
        let (slot, generation) = try add(resolved, calendar: schedule.calendarRule, policy: policy, options: options) { _, _ in
            (unretained.retain(), kind)
        }
        return TimerKey(slot: slot, generation: generation, scheduler: serial)
    }

    /// The deadline of `schedule` when it is a timeout — once, after a delay that is not
    /// negative, on the monotonic clock — with no tolerance: what `addTimeout` adds. Nil for
    /// any other schedule (the general path resolves and checks it).
    @inline(__always)
    func timeoutDeadline(_ schedule: TimerSchedule, _ tolerance: Duration) -> UInt64? {
        tolerance.isZero ? timeoutDeadline(schedule) : nil
    }

    /// The deadline of `schedule` when it is a timeout (`timeoutDeadline(_:_:)`): for a
    /// reschedule, which takes no tolerance.
    @inline(__always)
    func timeoutDeadline(_ schedule: TimerSchedule) -> UInt64? {
        guard schedule.clock == .monotonic, case let .after(.duration(delay)) = schedule.kind, !delay.isNegative else { return nil }
        return now(of: .monotonic, monotonic: clock.now().nanoseconds).saturatingAdd(UInt64(delay.saturatingNanoseconds))
    }

    /// Adds a timeout (`timeoutDeadline`) with no name — what a server keeps one of per
    /// connection or request — in one critical section, without the general path's tests for
    /// what such a timer cannot have (`add`). It calls `owner`, of callback kind `kind` (0: a
    /// `TimerHandle`, which `placing` is, and which learns its slot here): the record takes the
    /// caller's +1 reference; where the timer is not added, it stays the caller's. Returns its
    /// slot and generation; nil, having changed nothing, where the scheduler is not in its
    /// plain state: shut down, at its cap, its registry capped, no slot or queue room left
    /// without mapping more, or keeping handles as keyed timers. The general path then adds
    /// the timer or says why not.
    @inline(__always)
    func addTimeout(
        deadline: UInt64, policy: MissedTickPolicy, owner: Unmanaged<AnyObject>, kind: UInt8, placing handle: Unmanaged<TimerHandle>?
    ) throws(TimerError) -> (slot: UInt32, generation: UInt32)? {
        mutex.lock()
        guard !isShutDown, store.live < store.maxLive, kind != 0 || !handlesAsKeyedTimers, queues.monotonic.heap.hasRoom,
            registry.admitIfUncapped()
        else {
            mutex.unlock()
            return nil
        }
        guard let slot = store.allocate() else {
            registry.discharge()
            mutex.unlock()
            return nil
        }
        let record = store[slot]
        store.live += 1
        if store.live == 1 { link.hold(self) }
        nextSequence &+= 1
        record.pointee.startTimeout(at: deadline, policy: policy, owner: owner, kind: kind, sequence: nextSequence)
        let generation = record.pointee.generation
        handle?._withUnsafeGuaranteedRef { $0.place(slot: slot, generation: generation) }
        queues.monotonic.insert(intoRoom: slot, key: deadline, sequence: nextSequence, in: store.table)
        guard let wanted = wakeNeededLocked(forMonotonic: deadline) else {
            // Nothing ended and no event was queued: the section owes nothing to settle.
            checkInvariantsLocked()
            mutex.unlock()
            return (slot, generation)
        }
        try wakeAndUnlock(at: wanted, forNew: slot)
        return (slot, generation)
    }

    /// When the driver must now wake, a timer having just been queued on the monotonic clock
    /// for `key`; nil when it is armed early enough already. The earliest wake-up, not only
    /// this timer's: after a refused wake-up the driver may be armed later than an entry
    /// already queued (then it wakes once more than needed).
    @inline(__always)
    func wakeNeededLocked(forMonotonic key: UInt64) -> UInt64? {
        let wanted = queues.onlyMonotonic ? min(key, queues.monotonic.heap.topKey ?? key) : earliestWakeLocked(nil)
        return wanted < armedKey && wanted < Self.horizonNanoseconds ? wanted : nil
    }

    /// Arms the driver for `wanted`, the new timer in `slot` now the earliest, and unlocks; if
    /// the driver refuses, ends that timer (as `add` does) and throws. Out of line: few
    /// schedules move the earliest deadline.
    @inline(never)
    private func wakeAndUnlock(at wanted: UInt64, forNew slot: UInt32) throws(TimerError) {
        var after = AfterUnlock()
        var failure: TimerError?
        do throws(TimerError) { try wakeLocked(at: wanted) } catch {
            endLocked(slot, because: .cancelled, into: &after)
            failure = error
        }
        unlock(running: consume after)
        if let failure { throw failure }
    }

    /// Adds a timer to the store, registers its name, and queues it (or leaves it suspended).
    /// `owner` makes what the timer calls, given its slot and generation, under the lock, and
    /// hands it over +1 (the record's reference: a plain reference returned and stored would
    /// be retained and released again on the way).
    /// Returns the timer's slot and generation.
    @inline(__always)
    @discardableResult
    func add(
        _ resolved: TimerSchedule.Resolved, calendar: CalendarRule?, policy: MissedTickPolicy, options: TimerOptions?,
        owner: (UInt32, UInt32) throws(TimerError) -> (Unmanaged<AnyObject>, UInt8)
    ) throws(TimerError) -> (slot: UInt32, generation: UInt32) {
        var after = AfterUnlock()
        mutex.lock()
        let slot: UInt32
        let generation: UInt32
        let made: Unmanaged<AnyObject>
        let kind: UInt8
        do throws(TimerError) {
            slot = try addLocked(resolved, calendar: calendar, policy: policy, options: options, &after)
            generation = store[slot].pointee.generation
            do throws(TimerError) { (made, kind) = try owner(slot, generation) } catch {
                endLocked(slot, because: .cancelled, into: &after)
                throw error
            }
        } catch {
            unlock(running: consume after)
            throw error
        }
        let record = store[slot]
        record.pointee.adopt(owner: made)
        record.pointee.callbackKind = kind
        var failure: TimerError?
        var watch = false
        if resolved.clock != .monotonic { watch = needsClockWatcherLocked(for: resolved.clock) }
        if options?.startSuspended == true {
            record.pointee.state = .suspended
        } else {
            do throws(TimerError) { try queueLocked(slot, &after) } catch {
                endLocked(slot, because: .cancelled, into: &after)
                failure = error
            }
        }
        unlock(running: consume after)
        if watch { startWatchingClocks() }
        if let failure { throw failure }
        return (slot, generation)
    }

    /// Takes a slot for a new timer, counts it, registers its name and fills its record; the
    /// caller sets its owner and queues it.
    @inline(__always)
    private func addLocked(
        _ resolved: TimerSchedule.Resolved, calendar: CalendarRule?, policy: MissedTickPolicy, options: TimerOptions?,
        _ after: inout AfterUnlock
    ) throws(TimerError) -> UInt32 {
        if isShutDown { throw shutDownErrorLocked() }
        if store.live >= store.maxLive {
            store.refusedByLimit += 1
            throw .liveTimerLimit(scope: "\(backendName) backend", limit: store.maxLive)
        }
        try registry.admit()
        guard let slot = store.allocate() ?? allocateInNewChunkLocked() else {
            registry.discharge()
            throw .systemCall(call: "mmap", errno: ENOMEM)
        }
        let record = store[slot]
        if let name = options?.name {
            do throws(TimerError) { try registry.claim(name, scheduler: self, slot: slot, generation: record.pointee.generation) } catch {
                store.free(slot)
                registry.discharge()
                throw error
            }
        }
        store.live += 1
        if store.live == 1 { link.hold(self) }
        record.pointee.startLive()
        record.pointee.fires = 0
        record.pointee.deadline = resolved.firstDeadline
        record.pointee.interval = resolved.intervalNanoseconds
        record.pointee.clock = resolved.clock
        record.pointee.policy = policy
        if options != nil || calendar != nil || resolved.jitterNanoseconds > 0
            || TimerRecord.needsExtras(forRemaining: resolved.remaining, interval: resolved.intervalNanoseconds, calendar: calendar != nil)
        {
            let extras = TimerExtras()
            extras.calendarRule = calendar
            extras.jitter = resolved.jitterNanoseconds
            if let options {
                extras.name = options.name
                extras.tolerance = options.tolerance
                extras.runsTasks = options.runsTasks
                extras.helper = options.helper
                extras.parksAfterLastCall = options.helper != nil
                extras.target = options.target
            }
            record.pointee.extras = extras
            drawJitterLocked(record)
        }
        record.pointee.setRemaining(resolved.remaining)
        return slot
    }

    /// A slot in a chunk the registry lends, when every chunk this store has is full; nil
    /// when none can be mapped.
    private func allocateInNewChunkLocked() -> UInt32? {
        // A lent chunk whose every slot has used up its generations has none to give.
        while let chunk = registry.lendChunk(to: self, at: store.chunks.count) {
            store.add(chunk)
            if let slot = store.allocate() { return slot }
        }
        return nil
    }

    /// Puts a scheduled timer in deadline order in its clock's queue and arms the driver if it
    /// is now the earliest. `previousKey` is the key it waited for until now, when it still has
    /// a live entry in that queue (a reschedule on the same clock): a later key then leaves that
    /// entry where it is, to be re-filed when it reaches the top (an idle timeout moved on every
    /// read costs no sift). An earlier key gives it a new entry and the old one dies. If the
    /// driver refuses, or the queue gets no memory for a new chunk, the timer is left unqueued
    /// and the error is rethrown.
    func queueLocked(_ slot: UInt32, previousKey: UInt64? = nil, _ after: inout AfterUnlock) throws(TimerError) {
        let record = store[slot]
        let key = RepeatRule.latestFireTime(record.pointee)
        let clock = record.pointee.clock
        if clock != .monotonic { store.writableFireStats(slot).pointee.clockSteps = clocks.steps(of: clock) }
        nextSequence &+= 1
        record.pointee.orderSequence = nextSequence
        if record.pointee.entrySequence != 0 {
            if let previousKey, key >= previousKey { return }
            killEntryLocked(slot)
        }
        if clock != .monotonic && queues.read(clock, { $0.live == 0 }) {
            // The offsets may be old: none was read while no timer waited on this clock.
            refreshOffsetsLocked()
        }
        let sequence = nextSequence
        guard queues.with(clock, { $0.insert(slot, key: key, sequence: sequence, in: store.table) }) else {
            // Out of memory for the queue: the timer is left unqueued, as a refused wake-up leaves it.
            throw .systemCall(call: "mmap", errno: errno)
        }
        record.pointee.entrySequence = nextSequence
        // The earliest wake-up, not only this timer's (see `wakeNeededLocked`).
        let wanted: UInt64
        if clock == .monotonic {
            guard let monotonic = wakeNeededLocked(forMonotonic: key) else { return }
            wanted = monotonic
        } else if hasOwnClockDriver {
            rearmOwnClockLocked(clock)
            return
        } else {
            wanted = earliestWakeLocked(nil)
            guard wanted < armedKey, wanted < Self.horizonNanoseconds else { return }
        }
        do throws(TimerError) { try wakeLocked(at: wanted) } catch {
            killEntryLocked(slot)
            throw error
        }
    }

    /// The one place a queue entry dies: the timer in `slot` stops waiting in its clock's queue
    /// (cancelled, ended, suspended, moved earlier or to another clock). The queue pays for the
    /// dead entry there (`ClockQueue.entryDied`), so dead entries stay bounded on every path.
    @inline(__always)
    func killEntryLocked(_ slot: UInt32) {
        let record = store[slot]
        let sequence = record.pointee.entrySequence
        guard sequence != 0 else { return }
        record.pointee.entrySequence = 0
        queues.with(record.pointee.clock) { $0.entryDied(sequence: sequence, in: store.table) }
    }

    /// Called when the timer in `slot` stops being scheduled: its entry dies. The native
    /// wake-up stays armed for the old earliest deadline: the loop wakes once, finds nothing due
    /// and re-arms, which is cheaper than a re-arm per cancel when timers are cancelled in
    /// deadline order (timeouts). Only empty queues disarm at once (if that fails the loop wakes
    /// once for nothing); jobs waiting for the loop keep their wake-up.
    @inline(__always)
    func retireLocked(_ slot: UInt32, _ after: inout AfterUnlock) {
        killEntryLocked(slot)
        disarmIfIdleLocked(&after)
    }

    /// Disarms the driver once the queues are empty (see `retireLocked`).
    @inline(__always)
    func disarmIfIdleLocked(_ after: inout AfterUnlock) {
        guard queues.isEmpty else { return }
        if armedKey != .max, jobs.isEmpty { try? wakeLocked(at: .max) }
        if armedOwnClockKeys.any { rearmOwnClocksLocked() }
    }

    /// When the loop must wake next, on the monotonic clock: the earliest of the queues' first
    /// entries, each converted from its own clock through `readings` (a wake-up's), or through
    /// the offsets as last read when nil; `.max` when nothing can come due (no entry, or only
    /// ones past the horizon).
    func earliestWakeLocked(_ readings: ClockReadings?) -> UInt64 {
        var earliest = queues.monotonic.heap.topKey ?? .max
        // A driver that keeps the other clocks' deadlines on their own clocks is armed for
        // them apart (`rearmOwnClocksLocked`).
        if !queues.onlyMonotonic, !hasOwnClockDriver {
            if let key = queues.continuous.heap.topKey { earliest = min(earliest, monotonicLocked(key, on: .continuous, readings)) }
            if let key = queues.wall.heap.topKey { earliest = min(earliest, monotonicLocked(key, on: .wall, readings)) }
        }
        return earliest < Self.horizonNanoseconds ? earliest : .max
    }

    /// When `key` on `clock` comes on the monotonic clock.
    @inline(__always)
    func monotonicLocked(_ key: UInt64, on clock: DeadlineClock, _ readings: ClockReadings?) -> UInt64 {
        readings?.monotonic(key, on: clock) ?? clocks.offsets.monotonic(key, on: clock)
    }

    /// Arms the driver for the earliest wake-up, or disarms it when nothing can come due.
    @inline(__always)
    func rearmLocked(_ readings: ClockReadings?, _ after: inout AfterUnlock) throws(TimerError) {
        if hasOwnClockDriver { rearmOwnClocksLocked() }
        let wanted = earliestWakeLocked(readings)
        guard wanted != armedKey else { return }
        try wakeLocked(at: wanted)
    }

    /// Arms the owned driver's own clocks for the continuous and wall queues' first entries,
    /// where that changed. Out of line: the fire path of a scheduler without such a
    /// driver pays one test of a flag for it.
    @inline(never)
    func rearmOwnClocksLocked() {
        guard !queues.onlyMonotonic || armedOwnClockKeys.any else { return }
        rearmOwnClockLocked(.continuous)
        rearmOwnClockLocked(.wall)
    }

    /// Arms the owned driver's own clock for `clock`'s queue's first entry (`.max`: none, or
    /// only ones past the horizon), unless it is armed for that already.
    @inline(never)
    func rearmOwnClockLocked(_ clock: DeadlineClock) {
        guard let ownedDriver else { return }
        let top = queues.read(clock) { $0.heap.topKey } ?? .max
        let wanted = top < Self.horizonNanoseconds ? top : .max
        guard wanted != armedOwnClockKeys[clock] else { return }
        ownedDriver.withBorrowed { $0.ownClock?.wake(on: clock, at: wanted) }
        armedOwnClockKeys[clock] = wanted
    }

    /// Asks the driver to wake the loop at `key` (`.max`: disarms). The driver is this
    /// scheduler's to keep, so it is called as it is; with none attached, nothing is armed.
    func wakeLocked(at key: UInt64) throws(TimerError) {
        guard let ownedDriver else { return }
        let deadline = key == .max ? MonotonicInstant.distantFuture : MonotonicInstant(nanoseconds: key)
        try ownedDriver.withBorrowed { owned throws(TimerError) in try owned.driver.wake(at: deadline) }
        armedKey = key
    }

    /// Draws the jitter of the next fire of the timer `record` holds, if it has one.
    func drawJitterLocked(_ record: UnsafeMutablePointer<TimerRecord>) {
        guard let extras = record.pointee.extras else { return }
        guard extras.jitter > 0 else {
            extras.jitterOffset = 0
            return
        }
        // SplitMix64: a few instructions per draw, and repeatable from a seed.
        jitterState &+= 0x9E37_79B9_7F4A_7C15
        var z = jitterState
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        extras.jitterOffset = z % (extras.jitter + 1)
    }

    /// Makes the jitter draws of this scheduler's timers repeatable from `seed`.
    func seedJitter(_ seed: UInt64) { mutex.withLock { jitterState = seed } }
}

/// The keys an `OwnClockTimerDriver` is armed for on the continuous and wall clocks (`.max`:
/// not armed).
struct OwnClockKeys {
    var continuous: UInt64 = .max
    var wall: UInt64 = .max

    /// Whether either clock's timer is armed.
    var any: Bool { continuous != .max || wall != .max }

    subscript(clock: DeadlineClock) -> UInt64 {
        get { clock == .wall ? wall : continuous }
        set {
            if clock == .wall { wall = newValue } else { continuous = newValue }
        }
    }
}
