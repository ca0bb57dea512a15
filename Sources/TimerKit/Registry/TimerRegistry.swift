import Synchronization

/// Every live timer, on every backend, by unique name.
///
/// Timers register themselves when scheduled and leave when cancelled or finished. Look
/// them up, cancel, suspend or resume them by name or all at once, take snapshots, and add
/// observers that run around every handler call. Thread-safe; lookups are O(1).
///
/// It is a name index and nothing more: it holds no lock while timer code runs, and it
/// never scans timers on a lookup. A target-action timer whose target has been released
/// ends at its next due time (the proxy checks at fire time), when it is looked up by name,
/// in an O(n) listing (`snapshot()`, `names`), or at `cancelTimersOfReleasedTargets()`.
///
/// `TimerRegistry.shared` is the process-wide default; tests and libraries that want
/// isolation create their own and pass it to their backends.
public final class TimerRegistry: @unchecked Sendable {
    // @unchecked: all mutable state is guarded by `mutex`; `observerCount` is atomic.

    /// The process-wide registry that backends use unless given another.
    public static let shared = TimerRegistry()

    /// One place a timer can be registered. Slots are reused, and each reuse bumps the
    /// generation, so an id (slot + generation) is never handed out twice.
    private struct Slot {
        var generation: UInt32 = 0
        /// While the slot is free: the next free slot of the same shard (`noSlot`: none).
        var nextFree: UInt32 = noSlot
        var timer: TimerHandle?
    }

    static let noSlot = UInt32.max

    /// Slots are handed to schedulers in chunks of this many: every slot of a chunk belongs
    /// to one scheduler's `RegistryShard`, so that a scheduler lists its own timers (at
    /// shutdown) by reading its own chunks, never the other backends' timers.
    static let chunkSize = 256

    private let mutex = PThreadMutex()
    // Only touched while holding `mutex`, so the runtime exclusivity check is redundant.
    /// The slot table, in chunks of `chunkSize` slots that never move: growing adds a chunk
    /// (and now and then copies this small list of their addresses), so no registration copies
    /// the table under the lock (a million slots are 16 MB).
    @exclusivity(unchecked) private var slotChunks: [UnsafeMutablePointer<Slot>] = []
    /// Chunks no scheduler holds (their schedulers shut down with every timer gone).
    @exclusivity(unchecked) private var freeChunks: [UInt32] = []
    @exclusivity(unchecked) private var liveCount = 0
    @exclusivity(unchecked) private var maxLive = Int.max
    /// Schedules refused by `maxLive`.
    @exclusivity(unchecked) private var refusedByLimit = 0
    /// Ended timers whose slots are not yet cleared. Clearing a slot is a cache miss when
    /// there are many timers; done in batches the misses overlap. Every read flushes first,
    /// so no lookup ever sees an ended timer.
    @exclusivity(unchecked) private var pendingRemovals: [TimerHandle] = []
    private static let removalBatch = 256
    /// An empty buffer with room for a batch, kept for the next one (`releaseFlushed`).
    @exclusivity(unchecked) private var spareRemovals: [TimerHandle] = []
    @exclusivity(unchecked) private var idByName: [String: UInt64] = [:]
    /// The most slots one turn of the lock has listed or cleared, for tests of the bound on it.
    @exclusivity(unchecked) private var mostSlotsInOneTurn = 0
    @exclusivity(unchecked) private var observers: [(token: UInt64, observer: TimerObserver)] = []
    @exclusivity(unchecked) private var nextObserverToken: UInt64 = 1
    private let observerCount = Atomic<Int>(0)

    /// Creates an empty registry.
    public init() {}

    deinit {
        for chunk in slotChunks {
            chunk.deinitialize(count: Self.chunkSize)
            chunk.deallocate()
        }
    }

    private var slotCount: Int { slotChunks.count * Self.chunkSize }

    @inline(__always)
    private func slot(_ index: Int) -> UnsafeMutablePointer<Slot> {
        slotChunks[index / Self.chunkSize] + index % Self.chunkSize
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

    /// Registers the timer `make` builds for a fresh id in one of `shard`'s slots; refuses a
    /// duplicate `name`.
    func register(name: String?, in shard: RegistryShard, make: (UInt64) -> TimerHandle) throws(TimerError) -> TimerHandle {
        var flushed: [TimerHandle] = []
        defer { releaseFlushed(flushed) }
        return try mutex.withLock { () throws(TimerError) in
            if let name, idByName[name] != nil {
                flushed = flushLocked()  // the holder of the name may have just ended
                if idByName[name] != nil { throw .duplicateName(name) }
            }
            if liveCount >= maxLive {
                refusedByLimit += 1
                throw .liveTimerLimit(scope: "registry", limit: maxLive)
            }
            if shard.live >= shard.maxLive {
                shard.refusedByLimit += 1
                throw .liveTimerLimit(scope: "\(shard.backendName) backend", limit: shard.maxLive)
            }
            while shard.freeHead == Self.noSlot { giveChunkLocked(to: shard) }
            let index = shard.freeHead
            let free = slot(Int(index))
            shard.freeHead = free.pointee.nextFree
            let id = UInt64(free.pointee.generation) << 32 | UInt64(index)
            let timer = make(id)
            free.pointee.timer = timer
            shard.occupied += 1
            shard.live += 1
            liveCount += 1
            if let name { idByName[name] = id }
            return timer
        }
    }

    /// Gives `shard` a chunk of slots: a free one, or a new one at the end of the table.
    /// (Slot numbers are 32 bits in an id: 2^32 slots would take 64 GiB of table and their
    /// timers hundreds more, so memory runs out long before the numbers do.)
    private func giveChunkLocked(to shard: RegistryShard) {
        let chunk: UInt32
        if let free = freeChunks.popLast() {
            chunk = free
        } else {
            chunk = UInt32(slotChunks.count)
            let slots = UnsafeMutablePointer<Slot>.allocate(capacity: Self.chunkSize)
            slots.initialize(repeating: Slot(), count: Self.chunkSize)
            slotChunks.append(slots)
        }
        shard.chunks.append(chunk)
        let first = Int(chunk) * Self.chunkSize
        // Linked from the last, so that they are handed out in ascending order; a slot whose
        // generation has run out stays unused, so no id ever comes back.
        for index in (first..<first + Self.chunkSize).reversed() where slot(index).pointee.generation < UInt32.max {
            slot(index).pointee.nextFree = shard.freeHead
            shard.freeHead = UInt32(index)
        }
    }

    /// The most live timers this registry holds, across its backends; nil: no limit. See
    /// `limitLiveTimers(to:)`.
    public var maxLiveTimers: Int? {
        let limit = withCurrent { maxLive }
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
        withCurrent { maxLive = limit ?? .max }
    }

    func limitLiveTimers(to limit: Int?, in shard: RegistryShard) throws(TimerError) {
        if let limit, limit < 0 { throw .invalidOption(name: "limit", value: "\(limit)", allowed: "0... or nil") }
        withCurrent { shard.maxLive = limit ?? .max }
    }

    /// How many schedules `limitLiveTimers(to:)`'s cap has refused (each a `liveTimerLimit` error).
    public var refusedByLiveTimerLimit: Int { withCurrent { refusedByLimit } }

    func refusedByLiveTimerLimit(in shard: RegistryShard) -> Int { withCurrent { shard.refusedByLimit } }

    /// Live timers in `shard`'s slots: its scheduler's.
    func liveTimers(in shard: RegistryShard) -> Int { withCurrent { shard.live } }

    func maxLiveTimers(in shard: RegistryShard) -> Int? {
        let limit = withCurrent { shard.maxLive }
        return limit == .max ? nil : limit
    }

    /// Called when the scheduler that owns `shard` shuts down or goes away: once its last
    /// timer has left, its chunks go back to the registry for other schedulers.
    func retire(_ shard: RegistryShard) {
        let flushed: [TimerHandle] = mutex.withLock {
            let flushed = flushLocked()
            shard.isRetired = true
            releaseChunksIfEmptyLocked(shard)
            return flushed
        }
        releaseFlushed(flushed)
    }

    private func releaseChunksIfEmptyLocked(_ shard: RegistryShard) {
        guard shard.isRetired, shard.occupied == 0, !shard.chunks.isEmpty else { return }
        freeChunks.append(contentsOf: shard.chunks)
        shard.chunks = []
        shard.freeHead = Self.noSlot
    }

    /// Takes an ended timer out. Called once per timer, by its scheduler, with the scheduler's
    /// lock held (this lock nests inside a scheduler's, never the other way round). Returns a
    /// flushed batch of ended timers, for the caller to release after both locks (the last
    /// reference to another scheduler's timer can end that scheduler, whose `deinit` takes this
    /// lock), and then to hand back with `recycle`.
    ///
    /// A pending removal holds its timer, which holds its scheduler, which holds this
    /// registry: for a scheduler that has shut down, nothing may wait in the batch, or the
    /// cycle outlives everyone's references. Its timers are flushed at once.
    func remove(_ timer: TimerHandle) -> [TimerHandle] {
        mutex.withLock {
            pendingRemovals.append(timer)
            liveCount -= 1
            timer.scheduler.registryShard.live -= 1
            let flushNow = pendingRemovals.count >= Self.removalBatch || timer.scheduler.hasBegunShutdown
            return flushNow ? flushLocked() : []
        }
    }

    /// Takes ended timers out in one turn of the lock (a slice of a scheduler's shutdown), as
    /// `remove(_:)` does one.
    func remove(_ timers: [TimerHandle]) -> [TimerHandle] {
        guard let first = timers.first else { return [] }
        return mutex.withLock {
            pendingRemovals.append(contentsOf: timers)
            liveCount -= timers.count
            first.scheduler.registryShard.live -= timers.count
            return flushLocked()
        }
    }

    /// Takes back the storage of a batch `remove` returned, emptied, for a later batch.
    func recycle(_ batch: inout [TimerHandle]) {
        var emptied: [TimerHandle] = []
        swap(&emptied, &batch)
        releaseFlushed(emptied)
    }

    /// Clears the slots of pending removals. Returns the batch, whose references the caller
    /// releases after unlocking (a timer's deinit may run user code).
    private func flushLocked() -> [TimerHandle] {
        guard !pendingRemovals.isEmpty else { return [] }
        mostSlotsInOneTurn = max(mostSlotsInOneTurn, pendingRemovals.count)
        // A read-only pass first: its loads are independent, so the CPU overlaps their cache
        // misses. The clearing pass below releases references (atomic, serialising), and
        // would otherwise wait out one full miss per slot.
        var touched: UInt64 = 0
        for timer in pendingRemovals {
            let index = Int(timer.id & 0xFFFF_FFFF)
            if index < slotCount { touched &+= UInt64(slot(index).pointee.generation) }
        }
        guard touched != .max else { return [] }  // keeps the pass from being optimised away
        for timer in pendingRemovals {
            let index = Int(timer.id & 0xFFFF_FFFF)
            // The batch still holds the timer, so clearing the slot never frees it here.
            guard index < slotCount else { continue }
            let slot = slot(index)
            guard slot.pointee.timer === timer else { continue }
            slot.pointee.timer = nil
            let shard = timer.scheduler.registryShard
            shard.occupied -= 1
            // A slot whose generation would wrap is retired, so no id ever comes back.
            if slot.pointee.generation < UInt32.max {
                slot.pointee.generation += 1
                if !shard.isRetired {
                    slot.pointee.nextFree = shard.freeHead
                    shard.freeHead = UInt32(index)
                }
            }
            if let name = timer.customName { idByName[name] = nil }
            releaseChunksIfEmptyLocked(shard)
        }
        // The batch leaves with its storage; an empty buffer kept from an earlier batch takes
        // its place, so that removals allocate nothing in steady state.
        var batch: [TimerHandle] = []
        swap(&batch, &pendingRemovals)
        swap(&pendingRemovals, &spareRemovals)
        return batch
    }

    /// Releases a flushed batch, outside the lock (a timer's deinit may run user code), and
    /// keeps its emptied storage for a later batch.
    private func releaseFlushed(_ batch: consuming [TimerHandle]) {
        guard batch.capacity > 0 else { return }
        batch.removeAll(keepingCapacity: true)
        mutex.lock()
        if spareRemovals.capacity < batch.capacity { swap(&spareRemovals, &batch) }
        mutex.unlock()
    }

    /// The most slots one turn of the lock has listed or cleared so far (for tests: a backend's
    /// shutdown or a listing never holds the lock for all of a big table).
    package var slotsHandledInOneTurnAtMost: Int { mutex.withLock { mostSlotsInOneTurn } }

    /// Slots in the table, free ones included (for tests).
    package var slotTableCount: Int { mutex.withLock { slotCount } }

    /// Where the slot of the timer with `id` is stored, for tests that check slots never move.
    package func slotAddress(ofTimer id: UInt64) -> UnsafeRawPointer? {
        let index = Int(id & 0xFFFF_FFFF)
        return mutex.withLock { index < slotCount ? UnsafeRawPointer(slot(index)) : nil }
    }

    /// Clears the slots of every ended timer now instead of at the next batch.
    func applyPendingRemovals() {
        withCurrent {}
    }

    /// Runs `body` under the lock after applying pending removals.
    private func withCurrent<R>(_ body: () -> R) -> R {
        var flushed: [TimerHandle] = []
        defer { releaseFlushed(flushed) }
        return mutex.withLock {
            flushed = flushLocked()
            return body()
        }
    }

    private func timer(id: UInt64) -> TimerHandle? {
        let index = Int(id & 0xFFFF_FFFF)
        guard index < slotCount, slot(index).pointee.generation == UInt32(id >> 32) else { return nil }
        return slot(index).pointee.timer
    }

    /// Chunks of slots one turn of the lock lists (4,096 slots): listing a million timers never
    /// holds the lock, which every backend shares, for more than a slice.
    static let chunksPerSlice = 16

    /// The timers in the slots of `chunks`, from `cursor` on, for up to `count` chunks; advances
    /// `cursor`.
    private func timersLocked(inChunks chunks: (Int) -> Int?, from cursor: inout Int, count: Int) -> (timers: [TimerHandle], hasMore: Bool)
    {
        var timers: [TimerHandle] = []
        let end = cursor + count
        mostSlotsInOneTurn = max(mostSlotsInOneTurn, count * Self.chunkSize)
        while cursor < end, let chunk = chunks(cursor) {
            let first = chunk * Self.chunkSize
            for index in first..<first + Self.chunkSize {
                if let timer = slot(index).pointee.timer { timers.append(timer) }
            }
            cursor += 1
        }
        return (timers, chunks(cursor) != nil)
    }

    /// Calls `body` with every live timer, a slice at a time: each slice is listed under the
    /// lock, and `body` runs outside it. Timers registered meanwhile may or may not be listed.
    private func forEachSlice(_ body: ([TimerHandle]) -> Void) {
        var cursor = 0
        var more = true
        while more {
            let slice = withCurrent {
                timersLocked(inChunks: { $0 < slotChunks.count ? $0 : nil }, from: &cursor, count: Self.chunksPerSlice)
            }
            more = slice.hasMore
            body(slice.timers)
        }
    }

    /// The timers registered in `shard`'s slots (one scheduler's, found without reading any
    /// other scheduler's), from `cursor` on, `chunks` chunks of slots at a time.
    func timers(in shard: RegistryShard, from cursor: inout Int, chunks: Int) -> (timers: [TimerHandle], hasMore: Bool) {
        withCurrent {
            timersLocked(inChunks: { $0 < shard.chunks.count ? Int(shard.chunks[$0]) : nil }, from: &cursor, count: chunks)
        }
    }

    private func lookup(_ name: String) -> TimerHandle? {
        withCurrent {
            if let id = Self.generatedID(name) { return timer(id: id) }
            return idByName[name].flatMap { timer(id: $0) }
        }
    }

    /// Calls `body` with each live timer, after ending those whose target has been released.
    /// The targets are checked outside the lock (see `WeakReference`).
    private func forEachLiveTimerEndingOrphans(_ body: (TimerHandle) -> Void) {
        forEachSlice { slice in
            for timer in slice {
                if timer.hasReleasedTarget { timer.cancel(because: .targetReleased) } else { body(timer) }
            }
        }
    }

    /// The live timer registered as `name`, or nil. A target-action timer whose target has
    /// been released is ended here and not returned.
    public func timer(named name: String) -> TimerHandle? {
        guard let timer = lookup(name) else { return nil }
        if timer.hasReleasedTarget {
            timer.cancel(because: .targetReleased)
            return nil
        }
        return timer
    }

    /// The number of registered (scheduled or suspended) timers. O(1): it counts a
    /// target-action timer whose target was just released until that timer comes due or a
    /// listing or `cancelTimersOfReleasedTargets()` ends it.
    public var count: Int { withCurrent { liveCount } }

    /// The names of all live timers, sorted.
    public var names: [String] { snapshot().map(\.name) }

    /// A snapshot of every live timer, sorted by name. Timers that end while it is taken are
    /// left out, never listed as ended.
    public func snapshot() -> [TimerSnapshot] {
        var snapshots: [TimerSnapshot] = []
        forEachLiveTimerEndingOrphans { timer in timer.liveSnapshot.map { snapshots.append($0) } }
        return snapshots.sorted { $0.name < $1.name }
    }

    /// A snapshot of the timer registered as `name`.
    public func snapshot(named name: String) throws(TimerError) -> TimerSnapshot {
        guard let snapshot = try existing(name).liveSnapshot else { throw .noSuchTimer(name) }
        return snapshot
    }

    /// Ends every target-action timer whose target has been released and returns how many
    /// it ended. (They also end by themselves when they next come due.)
    @discardableResult
    public func cancelTimersOfReleasedTargets() -> Int {
        var ended = 0
        forEachSlice { slice in
            for timer in slice where timer.hasReleasedTarget && timer.isActive {
                timer.cancel(because: .targetReleased)
                ended += 1
            }
        }
        return ended
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
        forEachSlice { slice in for timer in slice { timer.cancel(because: .cancelledByCancelAll) } }
    }

    /// Suspends every live timer. Timers that end meanwhile are skipped.
    public func suspendAll() {
        forEachLiveTimerEndingOrphans { try? $0.suspend() }
    }

    /// Resumes every suspended timer. Timers that end meanwhile are skipped.
    public func resumeAll() {
        forEachLiveTimerEndingOrphans { try? $0.resume() }
    }

    /// Adds hooks that run around every handler call of every timer in this registry.
    /// Returns a token for `removeObserver(_:)`.
    @discardableResult
    public func addObserver(_ observer: TimerObserver) -> UInt64 {
        mutex.withLock {
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
        let removed: [TimerObserver] = mutex.withLock {
            let removed = observers.filter { $0.token == token }.map(\.observer)
            observers.removeAll { $0.token == token }
            observerCount.store(observers.count, ordering: .releasing)
            return removed
        }
        withExtendedLifetime(removed) {}
    }

    /// The observers to run around a handler call; no lock when there are none.
    func currentObservers() -> [TimerObserver] {
        guard observerCount.load(ordering: .acquiring) > 0 else { return [] }
        return mutex.withLock { observers.map(\.observer) }
    }
}

/// One scheduler's part of a registry: the chunks of slots its timers are registered in. Its
/// fields belong to the registry and are read and written only under the registry's lock.
final class RegistryShard: @unchecked Sendable {
    // @unchecked: `backendName` is immutable; every other stored property is read and written
    // only while holding the lock of the registry the owning scheduler registers in (one
    // registry per scheduler).
    let backendName: String
    /// Timers of the scheduler that have not ended (`occupied` less those waiting for removal).
    @exclusivity(unchecked) var live = 0
    /// The scheduler's cap on `live` (`Int.max`: none), and the schedules it refused.
    @exclusivity(unchecked) var maxLive = Int.max
    @exclusivity(unchecked) var refusedByLimit = 0
    @exclusivity(unchecked) var chunks: [UInt32] = []
    /// The first of its free slots, each linked to the next (`TimerRegistry.noSlot`: none).
    @exclusivity(unchecked) var freeHead = TimerRegistry.noSlot
    /// Slots holding a timer, ended timers waiting in the removal batch included.
    @exclusivity(unchecked) var occupied = 0
    /// Its scheduler has shut down: freed slots are not reused, and the chunks go back to the
    /// registry once the last timer has left.
    @exclusivity(unchecked) var isRetired = false

    init(backendName: String) { self.backendName = backendName }
}
