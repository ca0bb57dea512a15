import Synchronization

/// Every live timer, on every backend, by unique name.
///
/// Timers register themselves when scheduled and leave when cancelled or finished. Look
/// them up, cancel, suspend or resume them by name or all at once, take snapshots, and add
/// observers that run around every handler call. Thread-safe; lookups are O(1).
///
/// `TimerRegistry.shared` is the process-wide default; tests and libraries that want
/// isolation create their own and pass it to their backends.
public final class TimerRegistry: @unchecked Sendable {
    // @unchecked: all mutable state is guarded by `mutex`; `observerCount` is atomic.

    /// The process-wide registry that backends use unless given another.
    public static let shared = TimerRegistry()

    private static let nextID = Atomic<UInt64>(1)
    static func makeID() -> UInt64 { nextID.wrappingAdd(1, ordering: .relaxed).oldValue }

    private let mutex = PThreadMutex()
    private var byID: [UInt64: TimerHandle] = [:]
    private var idByName: [String: UInt64] = [:]
    /// Timers whose target is held weakly: checked for a dead target on every read.
    private var targeted: [UInt64: TimerHandle] = [:]
    private var observers: [(token: UInt64, observer: TimerObserver)] = []
    private var nextObserverToken: UInt64 = 1
    private let observerCount = Atomic<Int>(0)

    /// Creates an empty registry.
    public init() {}

    static let generatedPrefix = "timer#"

    /// The id a generated name stands for, if `name` has that form.
    static func generatedID(_ name: String) -> UInt64? {
        guard name.hasPrefix(generatedPrefix) else { return nil }
        let digits = name.dropFirst(generatedPrefix.count)
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber) else { return nil }
        return UInt64(digits)
    }

    /// Checks a caller's name before anything is allocated for it.
    static func validate(name: String) throws(TimerError) {
        if name.isEmpty { throw .emptyName }
        if generatedID(name) != nil { throw .reservedName(name) }
    }

    func insert(_ timer: TimerHandle, hasTarget: Bool) throws(TimerError) {
        try mutex.withLock { () throws(TimerError) in
            if let name = timer.customName {
                if idByName[name] != nil { throw .duplicateName(name) }
                idByName[name] = timer.id
            }
            byID[timer.id] = timer
            if hasTarget { targeted[timer.id] = timer }
        }
    }

    func remove(_ timer: TimerHandle) {
        let removed: TimerHandle? = mutex.withLock {
            guard let removed = byID.removeValue(forKey: timer.id) else { return nil }
            if let name = timer.customName { idByName[name] = nil }
            targeted[timer.id] = nil
            return removed
        }
        withExtendedLifetime(removed) {}
    }

    func timers(of scheduler: TimerScheduler) -> [TimerHandle] {
        mutex.withLock { byID.values.filter { $0.scheduler === scheduler } }
    }

    /// Cancels timers whose weakly held target has gone (the proxy's promise that a dead
    /// target's timers leave the registry), so every read below sees only live timers.
    private func endOrphans() {
        let orphans: [TimerHandle] = mutex.withLock {
            guard !targeted.isEmpty else { return [] }
            return targeted.values.filter { !($0.extras?.target?.isTargetAlive ?? true) }
        }
        for timer in orphans { timer.cancel() }
    }

    private func lookup(_ name: String) -> TimerHandle? {
        mutex.withLock {
            if let id = Self.generatedID(name) { return byID[id] }
            return idByName[name].flatMap { byID[$0] }
        }
    }

    /// The live timer registered as `name`, or nil.
    public func timer(named name: String) -> TimerHandle? {
        endOrphans()
        return lookup(name)
    }

    /// The number of live (scheduled or suspended) timers.
    public var count: Int {
        endOrphans()
        return mutex.withLock { byID.count }
    }

    /// The names of all live timers, sorted.
    public var names: [String] {
        endOrphans()
        return mutex.withLock { byID.values.map(\.name) }.sorted()
    }

    /// A snapshot of every live timer, sorted by name.
    public func snapshot() -> [TimerSnapshot] {
        endOrphans()
        return mutex.withLock { Array(byID.values) }.map(\.snapshot).sorted { $0.name < $1.name }
    }

    /// A snapshot of the timer registered as `name`.
    public func snapshot(named name: String) throws(TimerError) -> TimerSnapshot {
        try existing(name).snapshot
    }

    private func existing(_ name: String) throws(TimerError) -> TimerHandle {
        endOrphans()
        guard let timer = lookup(name) else { throw .noSuchTimer(name) }
        return timer
    }

    /// Cancels the timer registered as `name`.
    public func cancel(named name: String) throws(TimerError) { try existing(name).cancel() }

    /// Suspends the timer registered as `name`.
    public func suspend(named name: String) throws(TimerError) { try existing(name).suspend() }

    /// Resumes the timer registered as `name`.
    public func resume(named name: String) throws(TimerError) { try existing(name).resume() }

    /// Cancels every timer in this registry, on every backend.
    public func cancelAll() {
        for timer in mutex.withLock({ Array(byID.values) }) { timer.cancel() }
    }

    /// Suspends every live timer. Timers that end meanwhile are skipped.
    public func suspendAll() {
        for timer in mutex.withLock({ Array(byID.values) }) { try? timer.suspend() }
    }

    /// Resumes every suspended timer. Timers that end meanwhile are skipped.
    public func resumeAll() {
        for timer in mutex.withLock({ Array(byID.values) }) { try? timer.resume() }
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

    /// Removes the observer that `addObserver(_:)` returned `token` for.
    public func removeObserver(_ token: UInt64) {
        mutex.withLock {
            observers.removeAll { $0.token == token }
            observerCount.store(observers.count, ordering: .releasing)
        }
    }

    /// The observers to run around a handler call; no lock when there are none.
    func currentObservers() -> [TimerObserver] {
        guard observerCount.load(ordering: .acquiring) > 0 else { return [] }
        return mutex.withLock { observers.map(\.observer) }
    }
}
