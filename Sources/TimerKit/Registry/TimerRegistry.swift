import Synchronization

/// Every live timer, on every backend, by unique name.
///
/// Timers register themselves when scheduled and leave when cancelled or finished. Look
/// them up, cancel, suspend or resume them by name or all at once, take snapshots, and add
/// observers that run around every handler call. Thread-safe; lookups are O(1).
///
/// It is a name index and nothing more: the timers live in their backends' stores, in slots
/// whose numbers it hands out (so that an id, a slot and its generation, is never handed out
/// twice here), and it keeps only the names callers gave. It holds no lock while timer code
/// runs, and never scans timers on a lookup. A target-action timer whose target has been
/// released ends at its next due time (the proxy checks at fire time), when it is looked up by
/// name, in an O(n) listing (`snapshot()`, `names`), or at `cancelTimersOfReleasedTargets()`.
///
/// `TimerRegistry.shared` is the process-wide default; tests and libraries that want
/// isolation create their own and pass it to their backends.
public final class TimerRegistry: @unchecked Sendable {
    // @unchecked: all mutable state is guarded by `mutex`, but the atomics.

    /// The process-wide registry that backends use unless given another.
    public static let shared = TimerRegistry()

    /// Where a name leads: a scheduler's slot and its generation. The scheduler is held while
    /// its timer holds the name (not weakly: see `RecordChunk.owner`).
    private struct Entry {
        let scheduler: TimerScheduler
        let slot: UInt32
        let generation: UInt32
    }

    private let mutex = FutexLock()
    // Only touched while holding `mutex`, so the runtime exclusivity check is redundant.
    /// Every chunk of slots, by number; each lent to one scheduler at a time.
    @exclusivity(unchecked) private var chunks: [RecordChunk] = []
    /// Chunks no scheduler holds (their schedulers retired).
    @exclusivity(unchecked) private var freeChunks: [UInt32] = []
    @exclusivity(unchecked) private var idByName: [String: Entry] = [:]
    @exclusivity(unchecked) private var observers: [(token: UInt64, observer: TimerObserver)] = []
    @exclusivity(unchecked) private var nextObserverToken: UInt64 = 1
    private let observerCount = Atomic<Int>(0)
    /// Live timers of every backend here, and the cap on them and how often it refused.
    private let liveCount = Atomic<Int>(0)
    private let maxLive = Atomic<Int>(.max)
    private let refusedByLimit = Atomic<Int>(0)

    /// Turns of the lock so far, for tests that check what takes it.
    private let turns = Atomic<Int>(0)

    /// Creates an empty registry.
    public init() {}

    /// Turns of the registry's lock so far (tests: per-timer work never takes it).
    package var lockTurns: Int { turns.load(ordering: .relaxed) }

    /// Chunks of slots in the table (tests).
    package var chunkCount: Int { withLock { chunks.count } }

    /// Runs `body` under the lock, counting the turn.
    private func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        turns.add(1, ordering: .relaxed)
        return try mutex.withLock(body)
    }

    static let generatedPrefix = "timer#"

    static func generatedName(_ id: UInt64) -> String {
        let slot = id & 0xFFFF_FFFF
        let generation = id >> 32
        return generation == 0 ? "\(generatedPrefix)\(slot)" : "\(generatedPrefix)\(slot).\(generation)"
    }

    /// The id a generated name stands for, if `name` has that form (`timer#S` or `timer#S.G`).
    static func generatedID(_ name: String) -> UInt64? {
        guard name.hasPrefix(generatedPrefix) else { return nil }
        let parts = name.dropFirst(generatedPrefix.count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2,
            parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy { $0.isASCII && $0.isNumber } }),
            let slot = UInt32(parts[0])
        else { return nil }
        let generation = parts.count == 2 ? UInt32(parts[1]) : 0
        guard let generation else { return nil }
        return UInt64(generation) << 32 | UInt64(slot)
    }

    /// Checks a caller's name before anything is allocated for it.
    static func validate(name: String) throws(TimerError) {
        if name.isEmpty { throw .emptyName }
        if name.hasPrefix(generatedPrefix) { throw .reservedName(name) }
    }

    // MARK: What schedulers call (under their lock: this lock nests inside a scheduler's, and
    // no scheduler's is ever taken under it)

    /// Counts a new timer against the registry-wide cap.
    /// - Throws: `TimerError.liveTimerLimit` once the cap is reached.
    @inline(__always)
    func admit() throws(TimerError) {
        let limit = maxLive.load(ordering: .relaxed)
        // No cap (the default): one atomic add, where a compare-and-swap loop checks a cap.
        if limit == .max {
            liveCount.wrappingAdd(1, ordering: .relaxed)
            return
        }
        try admit(under: limit)
    }

    private func admit(under limit: Int) throws(TimerError) {
        var current = liveCount.load(ordering: .relaxed)
        while true {
            if current >= limit {
                refusedByLimit.add(1, ordering: .relaxed)
                throw .liveTimerLimit(scope: "registry", limit: limit)
            }
            let (exchanged, original) = liveCount.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }

    /// `admit()` where the registry has no cap (the default): counts the timer in and returns
    /// true; false, counting nothing, where it has one (`admit()` checks it).
    @inline(__always)
    func admitIfUncapped() -> Bool {
        guard maxLive.load(ordering: .relaxed) == .max else { return false }
        liveCount.wrappingAdd(1, ordering: .relaxed)
        return true
    }

    /// A timer has ended. One atomic subtraction: a checked one is a compare-and-swap loop.
    @inline(__always)
    func discharge() { liveCount.wrappingSubtract(1, ordering: .relaxed) }

    /// Registers `name` for the timer in `scheduler`'s `slot`.
    /// - Throws: `TimerError.duplicateName` if a live timer holds it.
    func claim(_ name: String, scheduler: TimerScheduler, slot: UInt32, generation: UInt32) throws(TimerError) {
        try withLock { () throws(TimerError) in
            if idByName[name] != nil { throw .duplicateName(name) }
            idByName[name] = Entry(scheduler: scheduler, slot: slot, generation: generation)
        }
    }

    /// Lets `name` go, if the timer in `scheduler`'s `slot` holds it. The entry is released
    /// after unlocking (it holds the scheduler).
    func release(_ name: String, scheduler: TimerScheduler, slot: UInt32) {
        let released: Entry? = withLock {
            guard let holder = idByName[name], holder.slot == slot, holder.scheduler === scheduler else { return nil }
            return idByName.removeValue(forKey: name)
        }
        withExtendedLifetime(released) {}
    }

    /// A chunk of slots for `scheduler`, to be its chunk number `index`: a free one, or a new
    /// one; nil when none can be mapped. Its owner and its place in the owner's store change
    /// together here, under this lock, where a lookup by generated name reads both.
    func lendChunk(to scheduler: TimerScheduler, at index: Int) -> RecordChunk? {
        withLock {
            let chunk: RecordChunk
            if let free = freeChunks.popLast() {
                chunk = chunks[Int(free)]
            } else {
                guard let made = RecordChunk(number: UInt32(chunks.count)) else { return nil }
                chunk = made
                chunks.append(chunk)
            }
            chunk.owner = scheduler.link
            chunk.ownerIndex = index
            return chunk
        }
    }

    /// Takes back the chunks of a scheduler that is going away, every slot free, generations
    /// kept.
    func retire(returning chunks: [RecordChunk]) {
        withLock {
            for chunk in chunks {
                chunk.owner = nil
                freeChunks.append(chunk.number)
            }
        }
    }

    // MARK: Caps

    /// The most live timers this registry holds, across its backends; nil: no limit. See
    /// `limitLiveTimers(to:)`.
    public var maxLiveTimers: Int? {
        let limit = maxLive.load(ordering: .relaxed)
        return limit == .max ? nil : limit
    }

    /// Caps the live timers (scheduled or suspended) of every backend registering here
    /// together: once `limit` are live, scheduling another throws
    /// `TimerError.liveTimerLimit(scope:limit:)` until one ends. Timers live already are
    /// kept, even above a lower new limit. Nil removes the cap. Each backend can also have a
    /// cap of its own (`TimerBackend/limitLiveTimers(to:)`).
    /// - Throws: `TimerError.invalidOption` for a negative `limit`.
    public func limitLiveTimers(to limit: Int?) throws(TimerError) {
        if let limit, limit < 0 { throw .invalidOption(name: "limit", value: "\(limit)", allowed: "0... or nil") }
        maxLive.store(limit ?? .max, ordering: .relaxed)
    }

    /// How many schedules `limitLiveTimers(to:)`'s cap has refused (each a `liveTimerLimit` error).
    public var refusedByLiveTimerLimit: Int { refusedByLimit.load(ordering: .relaxed) }

    // MARK: Lookups

    /// The schedulers that hold chunks here and have live timers, for listings.
    private var schedulers: [TimerScheduler] {
        var seen = Set<ObjectIdentifier>()
        var found: [TimerScheduler] = []
        withLock {
            for chunk in chunks {
                if let link = chunk.owner, seen.insert(ObjectIdentifier(link)).inserted, let scheduler = link.scheduler {
                    found.append(scheduler)
                }
            }
        }
        return found
    }

    /// The handle of the live timer `name` names, by the caller's name or a generated one.
    private func lookup(_ name: String) -> TimerHandle? {
        let found: (scheduler: TimerScheduler, slot: UInt32, generation: UInt32)? = withLock {
            if let id = Self.generatedID(name) {
                let number = Int((id & 0xFFFF_FFFF) >> UInt64(RecordChunk.shift))
                guard number < chunks.count, let owner = chunks[number].owner?.scheduler else { return nil }
                let slot = UInt32(chunks[number].ownerIndex << RecordChunk.shift | Int(id & UInt64(RecordChunk.mask)))
                return (owner, slot, UInt32(id >> 32))
            }
            guard let entry = idByName[name] else { return nil }
            return (entry.scheduler, entry.slot, entry.generation)
        }
        guard let found else { return nil }
        return found.scheduler.front(slot: found.slot, generation: found.generation)
    }

    /// The live timer registered as `name`, or nil. A target-action timer whose target has
    /// been released is ended here and not returned.
    public func timer(named name: String) -> TimerHandle? {
        guard let timer = lookup(name) else { return nil }
        if timer.scheduler.hasReleasedTarget(timer.key) {
            timer.cancel(because: .targetReleased)
            return nil
        }
        return timer
    }

    /// The number of registered (scheduled or suspended) timers. O(1): it counts a
    /// target-action timer whose target was just released until that timer comes due or a
    /// listing or `cancelTimersOfReleasedTargets()` ends it.
    public var count: Int { liveCount.load(ordering: .relaxed) }

    /// The names of all live timers, sorted.
    public var names: [String] { snapshot().map(\.name) }

    /// A snapshot of every live timer, sorted by name. Timers that end while it is taken are
    /// left out, never listed as ended. Each backend is read a chunk of slots at a time, under
    /// its own lock only.
    public func snapshot() -> [TimerSnapshot] {
        var snapshots: [TimerSnapshot] = []
        for scheduler in schedulers {
            scheduler.endTimersOfReleasedTargets()
            scheduler.forEachSnapshotSlice { snapshots.append(contentsOf: $0) }
        }
        return snapshots.sorted { $0.name < $1.name }
    }

    /// A snapshot of the timer registered as `name`.
    public func snapshot(named name: String) throws(TimerError) -> TimerSnapshot {
        let timer = try existing(name)
        guard let snapshot = timer.scheduler.liveSnapshot(of: timer.key) else { throw .noSuchTimer(name) }
        return snapshot
    }

    /// Ends every target-action timer whose target has been released and returns how many
    /// it ended. (They also end by themselves when they next come due.)
    @discardableResult
    public func cancelTimersOfReleasedTargets() -> Int {
        schedulers.reduce(0) { $0 + $1.endTimersOfReleasedTargets() }
    }

    private func existing(_ name: String) throws(TimerError) -> TimerHandle {
        guard let timer = timer(named: name) else { throw .noSuchTimer(name) }
        return timer
    }

    /// Cancels the timer registered as `name`.
    public func cancel(named name: String) throws(TimerError) { try existing(name).cancel(because: .cancelledByName) }

    /// Suspends the timer registered as `name`.
    public func suspend(named name: String) throws(TimerError) { try existing(name).suspend() }

    /// Resumes the timer registered as `name`.
    public func resume(named name: String) throws(TimerError) { try existing(name).resume() }

    /// Cancels every timer in this registry, on every backend.
    public func cancelAll() {
        for scheduler in schedulers { scheduler.endAll(because: .cancelledByCancelAll) }
    }

    /// Suspends every live timer. Timers that end meanwhile are skipped.
    public func suspendAll() {
        for scheduler in schedulers {
            scheduler.endTimersOfReleasedTargets()
            scheduler.setAll(suspended: true)
        }
    }

    /// Resumes every suspended timer. Timers that end meanwhile are skipped.
    public func resumeAll() {
        for scheduler in schedulers {
            scheduler.endTimersOfReleasedTargets()
            scheduler.setAll(suspended: false)
        }
    }

    // MARK: Observers

    /// Adds hooks that run around every handler call of every timer in this registry.
    /// Returns a token for `removeObserver(_:)`.
    @discardableResult
    public func addObserver(_ observer: TimerObserver) -> UInt64 {
        withLock {
            let token = nextObserverToken
            nextObserverToken += 1
            observers.append((token, observer))
            observerCount.store(observers.count, ordering: .releasing)
            return token
        }
    }

    /// Removes the observer that `addObserver(_:)` returned `token` for. A handler call
    /// already under way may still run its hooks.
    public func removeObserver(_ token: UInt64) {
        // The removed hooks are released after unlocking: their captures' deinits are user code.
        let removed: [TimerObserver] = withLock {
            let removed = observers.filter { $0.token == token }.map(\.observer)
            observers.removeAll { $0.token == token }
            observerCount.store(observers.count, ordering: .releasing)
            return removed
        }
        withExtendedLifetime(removed) {}
    }

    /// Whether any observer is registered (no lock).
    var hasObservers: Bool { observerCount.load(ordering: .acquiring) > 0 }

    /// The observers to run around a handler call; no lock when there are none.
    func currentObservers() -> [TimerObserver] {
        guard hasObservers else { return [] }
        return withLock { observers.map(\.observer) }
    }
}
