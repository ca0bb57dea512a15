/// The figures `TimerBackend.statistics` reports, recorded as timers fire, and the reports of
/// slow handlers and whole-backend events. Recording happens under `mutex`, in memory
/// allocated once; event observers run after unlocking, like every other callback.
extension TimerScheduler {
    /// The counters and histograms behind `statistics`. Plain data, guarded by `mutex`.
    struct StatisticsRecorder {
        /// Lateness buckets, then handler-time buckets: `DurationBuckets.count` each.
        let buckets: UnsafeMutablePointer<UInt64>
        var latenessCount: UInt64 = 0
        var latenessMax: UInt64 = 0
        var handlerCount: UInt64 = 0
        var handlerMax: UInt64 = 0
        var fires = 0
        var cancels = 0
        var skipped = 0
        var delayed = 0
        var busyNanoseconds: UInt64 = 0
        var clockChanges = 0
        /// The longest handler call, and its timer's name when it ran (a generated name is
        /// made from the id when read).
        var longestID: UInt64 = 0
        var longestName: String?
        var since: UInt64

        init(since: UInt64) {
            buckets = .allocate(capacity: 2 * DurationBuckets.count)
            buckets.initialize(repeating: 0, count: 2 * DurationBuckets.count)
            self.since = since
        }

        func free() { buckets.deallocate() }

        mutating func reset(since now: UInt64) {
            buckets.update(repeating: 0, count: 2 * DurationBuckets.count)
            let kept = buckets
            self = StatisticsRecorder(reusing: kept, since: now)
        }

        private init(reusing buckets: UnsafeMutablePointer<UInt64>, since: UInt64) {
            self.buckets = buckets
            self.since = since
        }

        @inline(__always)
        mutating func recordLateness(_ nanoseconds: UInt64) {
            buckets[DurationBuckets.index(of: nanoseconds)] &+= 1
            latenessCount &+= 1
            if nanoseconds > latenessMax { latenessMax = nanoseconds }
        }

        /// Records a handler call; returns whether it is the longest so far.
        @inline(__always)
        mutating func recordHandler(_ nanoseconds: UInt64) -> Bool {
            buckets[DurationBuckets.count + DurationBuckets.index(of: nanoseconds)] &+= 1
            handlerCount &+= 1
            busyNanoseconds &+= nanoseconds
            guard nanoseconds > handlerMax || handlerCount == 1 else { return false }
            handlerMax = nanoseconds
            return true
        }

        func histogram(offset: Int, count: UInt64, max: UInt64) -> DurationHistogram {
            DurationHistogram(
                count: Int(clamping: count), max: .nanoseconds(Int64(clamping: max)),
                counts: Array(UnsafeBufferPointer(start: buckets + offset, count: DurationBuckets.count)))
        }
    }

    /// The figures so far (see `TimerStatistics`).
    func statistics() -> TimerStatistics {
        mutex.withLock {
            let live = store.live
            let now = clock.now().nanoseconds
            let elapsed = now > stats.since ? now - stats.since : 0
            return TimerStatistics(
                backend: backendName, liveTimers: live, fires: stats.fires, cancels: stats.cancels,
                lateness: stats.histogram(offset: 0, count: stats.latenessCount, max: stats.latenessMax),
                handlerTime: stats.histogram(offset: DurationBuckets.count, count: stats.handlerCount, max: stats.handlerMax),
                missedTicks: [.skip: stats.skipped, .delay: stats.delayed, .burst: 0],
                busyFraction: elapsed == 0 ? 0 : min(1, Double(stats.busyNanoseconds) / Double(elapsed)),
                clockChanges: stats.clockChanges,
                longestHandler: stats.handlerCount == 0
                    ? nil
                    : (stats.longestName ?? TimerRegistry.generatedName(stats.longestID), .nanoseconds(Int64(clamping: stats.handlerMax))),
                since: MonotonicInstant(nanoseconds: stats.since), at: MonotonicInstant(nanoseconds: now))
        }
    }

    /// Whether fires are recorded for `statistics` (the default). Off only to measure what
    /// recording costs: the microbenchmarks compare the fire path with it on and off.
    public var recordsFireStatistics: Bool {
        get { mutex.withLock { recordsStatistics } }
        set { mutex.withLock { recordsStatistics = newValue } }
    }

    /// Starts the figures again from now.
    func resetStatistics() {
        mutex.withLock { stats.reset(since: clock.now().nanoseconds) }
    }

    /// Records a handler call of `timer` that began at `began` for a tick due at `due`, and
    /// returned at `finished`; notes it for a slow-handler report when it ran past the
    /// threshold. A call under way when the figures were reset counts from the reset.
    @inline(__always)
    func recordCallLocked(_ slot: UInt32, began: UInt64, due: UInt64, finished: UInt64) {
        let late = began > due ? began - due : 0
        stats.recordLateness(late)
        stats.fires += 1
        let fireStats = store.writableFireStats(slot)
        fireStats.pointee.lastLateness = late
        if late > fireStats.pointee.maxLateness { fireStats.pointee.maxLateness = late }
        let start = max(began, stats.since)
        let ran = finished > start ? finished - start : 0
        let record = store[slot]
        if stats.recordHandler(ran) {
            stats.longestID = store.id(of: slot, generation: record.pointee.generation)
            stats.longestName = record.pointee.extras?.name
        }
        guard slowHandlerNanoseconds > 0 else { return }
        let id = store.id(of: slot, generation: record.pointee.generation)
        slowCalls.called(id)
        let whole = finished > began ? finished - began : 0
        if whole >= slowHandlerNanoseconds {
            slowCalls.note(
                .handler(timer: nameLocked(slot, generation: record.pointee.generation)), of: id, ran: whole, finished: finished,
                sequence: nextSequence)
        }
    }

    /// Records a job of a task that ran on the loop from `began` to `finished`.
    func recordJobLocked(began: UInt64, finished: UInt64) {
        let ran = finished > began ? finished - began : 0
        stats.busyNanoseconds &+= ran
        if slowHandlerNanoseconds > 0 && ran >= slowHandlerNanoseconds {
            slowCalls.note(.task, of: 0, ran: ran, finished: finished, sequence: nextSequence)
        }
    }

    /// Queues the reports of the slow calls noted since the last, each with the number of other
    /// timers that were due by the time it returned and waited for it: those this wake-up
    /// called after it, and those still waiting now that were queued before it returned. One
    /// walk over the due entries serves every report (one walk per report made a herd of slow
    /// handlers quadratic: 10,000 took 6 s).
    @inline(__always)
    func reportSlowCallsLocked() {
        guard !slowCalls.notes.isEmpty else {
            slowCalls.forgetCalls()
            return
        }
        reportNotedSlowCallsLocked()
    }

    /// Reports the slow calls noted in this wake-up (out of line: most wake-ups have none).
    @inline(never)
    private func reportNotedSlowCallsLocked() {
        defer { slowCalls.reset() }
        slowReportWalks += 1
        var waiting: [(key: UInt64, sequence: UInt64)] = []
        let latest = slowCalls.notes.map(\.finished).max() ?? 0
        for clock in DeadlineClock.allCases {
            let bound = clocks.offsets.own(latest, on: clock)
            queues.read(clock) { queue in
                queue.heap.forEachEntry(keyedAtOrBefore: bound) { entry in
                    let record = store[entry.slot]
                    if record.pointee.entrySequence == entry.sequence && record.pointee.orderSequence == entry.sequence {
                        waiting.append((clocks.offsets.monotonic(entry.key, on: clock), entry.sequence))
                    }
                }
            }
        }
        waiting.sort { $0.key < $1.key }
        // Entries queued after the first report (a repeat's next tick, say): few, checked one by one.
        let firstSequence = slowCalls.notes.map(\.sequence).min() ?? 0
        let queuedLater = waiting.filter { $0.sequence > firstSequence }
        let calledAfter = slowCalls.callsOfOtherTimersAfterEachNote()
        for (note, calledAfter) in zip(slowCalls.notes, calledAfter) {
            // Entries keyed at or before `finished`: a binary search of the sorted keys.
            var (low, high) = (0, waiting.count)
            while low < high {
                let middle = (low + high) / 2
                if waiting[middle].key <= note.finished { low = middle + 1 } else { high = middle }
            }
            var due = low
            due -= queuedLater.reduce(0) { $0 + ($1.key <= note.finished && $1.sequence > note.sequence ? 1 : 0) }
            pendingEvents.append(
                .slowHandler(
                    SlowHandlerReport(
                        backend: backendName, source: note.source, duration: .nanoseconds(Int64(clamping: note.ran)),
                        delayedTimers: due + calledAfter)))
        }
    }

    /// Slow calls of one wake-up, reported together when it ends (`reportSlowCallsLocked`).
    struct SlowCalls {
        struct Note {
            let source: SlowHandlerReport.Source
            /// The timer's id (0 for a job), the calls made before it returned, how long it ran,
            /// when it returned, and the scheduler's sequence then (what was queued before it).
            let timer: UInt64
            let callsBefore: Int
            let ran: UInt64
            let finished: UInt64
            let sequence: UInt64
        }

        private(set) var notes: [Note] = []
        /// The timers called so far in this wake-up, in order (kept only while slow calls are
        /// reported).
        private var called: [UInt64] = []

        mutating func called(_ timer: UInt64) { called.append(timer) }

        mutating func note(_ source: SlowHandlerReport.Source, of timer: UInt64, ran: UInt64, finished: UInt64, sequence: UInt64) {
            notes.append(Note(source: source, timer: timer, callsBefore: called.count, ran: ran, finished: finished, sequence: sequence))
        }

        /// For each note, the calls of other timers made after its call returned, in the same
        /// wake-up: every one was due by then (a wake-up calls only what was due when it began).
        /// One pass from the end, counting each timer's later calls.
        func callsOfOtherTimersAfterEachNote() -> [Int] {
            var laterCalls: [UInt64: Int] = [:]
            var result = [Int](repeating: 0, count: notes.count)
            var position = called.count
            for index in notes.indices.reversed() {
                let note = notes[index]
                while position > note.callsBefore {
                    position -= 1
                    laterCalls[called[position], default: 0] += 1
                }
                result[index] = called.count - note.callsBefore - laterCalls[note.timer, default: 0]
            }
            return result
        }

        /// Forgets the calls noted: a wake-up that reported nothing.
        @inline(__always)
        mutating func forgetCalls() {
            if !called.isEmpty { called.removeAll(keepingCapacity: true) }
        }

        mutating func reset() {
            notes.removeAll(keepingCapacity: true)
            called.removeAll(keepingCapacity: true)
        }
    }

    /// The threshold above which a handler or a task's job is reported; nil: none is.
    var slowHandlerThreshold: Duration? {
        get { mutex.withLock { slowHandlerNanoseconds == 0 ? nil : .nanoseconds(Int64(clamping: slowHandlerNanoseconds)) } }
        set {
            let nanoseconds = newValue.map { UInt64(clamping: max($0.saturatingNanoseconds, 1)) } ?? 0
            mutex.withLock { slowHandlerNanoseconds = nanoseconds }
        }
    }

    /// Adds an observer of whole-backend events, until the scheduler shuts down; after that
    /// it is let go of at once (after the lock), never called.
    func addEventObserver(_ observer: @escaping @Sendable (TimerBackendEvent) -> Void) {
        var refused: [@Sendable (TimerBackendEvent) -> Void] = []
        mutex.lock()
        if isShutDown { refused.append(observer) } else { eventObservers.append(observer) }
        mutex.unlock()
        withExtendedLifetime(refused) {}
    }

}
