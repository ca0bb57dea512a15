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
        let live = registry.liveTimers(in: registryShard)
        return mutex.withLock {
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

    /// Records a handler call of `timer` that began `late` after its tick was due, at `began`,
    /// and returned at `finished`, and queues a slow-handler report when it ran past the
    /// threshold. A call under way when the figures were reset counts from the reset.
    @inline(__always)
    func recordCallLocked(_ timer: TimerHandle, late: UInt64, began: UInt64, finished: UInt64) {
        stats.recordLateness(late)
        stats.fires += 1
        timer.lastLateness = late
        if late > timer.maxLateness { timer.maxLateness = late }
        let start = max(began, stats.since)
        let ran = finished > start ? finished - start : 0
        if stats.recordHandler(ran) {
            stats.longestID = timer.id
            stats.longestName = timer.customName
        }
        let whole = finished > began ? finished - began : 0
        if slowHandlerNanoseconds > 0 && whole >= slowHandlerNanoseconds {
            reportSlowLocked(.handler(timer: timer.name), ran: whole, finished: finished)
        }
    }

    /// Records a job of a task that ran on the loop from `began` to `finished`.
    func recordJobLocked(began: UInt64, finished: UInt64) {
        let ran = finished > began ? finished - began : 0
        stats.busyNanoseconds &+= ran
        if slowHandlerNanoseconds > 0 && ran >= slowHandlerNanoseconds {
            reportSlowLocked(.task, ran: ran, finished: finished)
        }
    }

    private func reportSlowLocked(_ source: SlowHandlerReport.Source, ran: UInt64, finished: UInt64) {
        let delayed = queue.countDue(by: finished) { entry in
            !isDeadLocked(entry) && entry.element._withUnsafeGuaranteedRef { $0.orderSequence == entry.sequence }
        }
        pendingEvents.append(
            .slowHandler(
                SlowHandlerReport(
                    backend: backendName, source: source, duration: .nanoseconds(Int64(clamping: ran)), delayedTimers: delayed)))
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

    /// Takes the events queued under the lock, to deliver after unlocking (`deliver`).
    @inline(__always)
    func takeEventsLocked() -> (events: [TimerBackendEvent], observers: [@Sendable (TimerBackendEvent) -> Void]) {
        guard !pendingEvents.isEmpty else { return ([], []) }
        defer { pendingEvents = [] }
        return (pendingEvents, eventObservers)
    }

    /// Tells every observer of each event, outside the lock.
    func deliver(_ taken: (events: [TimerBackendEvent], observers: [@Sendable (TimerBackendEvent) -> Void])) {
        for event in taken.events { for observer in taken.observers { observer(event) } }
    }
}
