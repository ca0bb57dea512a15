import Glibc

/// A scheduled timer: the value every `schedule` call returns.
///
/// Cancel, suspend, resume or reschedule it from any thread. It is registered in its
/// backend's registry until it is cancelled or finishes. Copies of it are the same timer, and
/// once the timer has ended it still answers `fireCount`, `endReason`, `currentState` and
/// `name`.
///
/// A handle is a small front (its backend, its timer's slot there, and what it learns when the
/// timer ends): the timer itself lives in its backend's store.
public final class TimerHandle: @unchecked Sendable, Hashable, CustomStringConvertible {
    // @unchecked: `scheduler` is immutable; `key` (its slot and generation) is written once, under
    // `scheduler.mutex`, before the handle is stored or returned to anyone (`place`), and never
    // again; `handler` and `endFacts` are read and written only while holding
    // `scheduler.mutex` (and `endFacts`, once set, never changes again), but for one last write
    // of `handler` (`letGoOfHandler`), by the thread that ended the timer after it unlocked:
    // once ended, nothing reads it.

    let scheduler: TimerScheduler
    /// The key of its timer: what the scheduler's operations take, as for a timer scheduled with
    /// a key. A handle adds its handler, and what it learns when its timer ends.
    @exclusivity(unchecked) private(set) var key: TimerKey
    /// Where the timer lives in its scheduler's store, and the slot's generation then.
    var slot: UInt32 { key.slot }
    var generation: UInt32 { key.generation }
    /// The handler of a timer scheduled with a closure (its handle is what the store calls);
    /// `TimerScheduler.endedHandler` once it has ended, or for a timer scheduled with a key.
    @exclusivity(unchecked) var handler: @Sendable (Tick) -> Void
    /// What it learned when its timer ended; `.live` until then.
    @exclusivity(unchecked) var endFacts = EndFacts.live

    init(scheduler: TimerScheduler, slot: UInt32, generation: UInt32, handler: @escaping @Sendable (Tick) -> Void) {
        self.scheduler = scheduler
        self.key = TimerKey(slot: slot, generation: generation, scheduler: scheduler.serial)
        self.handler = handler
    }

    /// A handle whose slot is not known yet: made before locking, so that its allocation is
    /// not paid under the lock, and placed (`place`) under it before anyone sees it.
    init(scheduler: TimerScheduler, handler: @escaping @Sendable (Tick) -> Void) {
        self.scheduler = scheduler
        self.key = TimerKey(slot: TimerStore.none, generation: 0, scheduler: scheduler.serial)
        self.handler = handler
    }

    /// Names the slot of its timer: once, under the scheduler's lock, before the handle is stored
    /// or returned.
    func place(slot: UInt32, generation: UInt32) {
        key = TimerKey(slot: slot, generation: generation, scheduler: key.scheduler)
    }

    /// Lets go of the handler of its ended timer (outside the lock: its captures' deinits are
    /// user code).
    func letGoOfHandler() { handler = TimerScheduler.endedHandler }

    deinit {
        // Nothing else holds it now: its facts are read without the lock.
        if endFacts.hasCustomName { EndedNames.forget(self) }
    }

    /// Unique within its registry and never reused there; a timer with no name of its own is
    /// listed under a name made from it. An identifier only: compare it, do not read its bits.
    public var id: UInt64 { scheduler.id(of: key) }

    /// The registered name: the caller's, or one generated from its `id` (`timer#` and a number).
    public var name: String { scheduler.mutex.withLock { nameLocked() } }

    /// The name of the backend this timer runs on.
    public var backendName: String { scheduler.backendName }

    /// Whether the timer is scheduled or suspended (not cancelled or finished).
    public var isActive: Bool { !currentState.hasEnded }

    /// The current state.
    public var currentState: TimerState {
        scheduler.mutex.withLock { scheduler.liveRecordLocked(key)?.pointee.state ?? endFacts.state }
    }

    /// Handler calls so far.
    public var fireCount: Int {
        scheduler.mutex.withLock { scheduler.liveRecordLocked(key)?.pointee.fires ?? endFacts.fires }
    }

    /// A point-in-time view: name, backend, state, fires, next deadline.
    public var snapshot: TimerSnapshot {
        scheduler.mutex.withLock {
            if scheduler.liveRecordLocked(key) != nil { return scheduler.snapshotLocked(slot) }
            return TimerSnapshot(
                name: nameLocked(), backend: backendName, state: endFacts.state, fires: endFacts.fires, nextDeadline: nil,
                interval: nil, lastLateness: nil, maxLateness: nil, missedTicks: 0)
        }
    }

    /// Stops the timer. Idempotent; never throws. Once it returns, the loop begins no new call
    /// of the handler; a call it had already begun (running the observers' `willFire` hooks,
    /// or the handler) may still run the handler and finish: `cancelAndWait()` waits for it.
    public func cancel() { scheduler.cancel(key) }

    /// Why the timer ended; nil while it is live (scheduled or suspended).
    public var endReason: TimerEndReason? {
        scheduler.mutex.withLock { endFacts.hasEnded ? scheduler.endReasonLocked(endFacts.cause) : nil }
    }

    /// Runs `action` with the reason once the timer has ended and no call of its handler, nor
    /// a task it started, is still running: at once (on this thread) if that is so already,
    /// otherwise on the thread that ended it, outside TimerKit's locks. It must be quick.
    public func onEnd(_ action: @escaping @Sendable (TimerEndReason) -> Void) {
        scheduler.whenEnded(key) { [self] in action(endReason ?? .completed) }
    }

    func cancel(because cause: EndCause) { scheduler.cancel(key, because: cause) }

    /// Cancels, then waits until a call of this timer's handler that the loop had already begun
    /// has returned: once it returns, no handler of this timer is running or about to start,
    /// and none will. Called from inside that handler it returns at once instead of deadlocking.
    public func cancelAndWait() {
        cancel()
        scheduler.waitUntilIdle(key)
    }

    /// Keeps the timer but stops it firing until `resume()`. Idempotent: suspending twice
    /// and resuming once runs it again (unlike a GCD source, which counts).
    public func suspend() throws(TimerError) {
        try scheduler.suspend(key) { [unowned(unsafe) self] _ in endedErrorLocked() }
    }

    /// Resumes a suspended timer. Ticks that came due while it was suspended are handled by
    /// its missed-tick policy (`.skip`: fire once now). Resuming a scheduled timer does nothing.
    public func resume() throws(TimerError) {
        try scheduler.resume(key) { [unowned(unsafe) self] _ in endedErrorLocked() }
    }

    /// Replaces the timer's schedule, keeping its name, handler and registry entry. A suspended
    /// timer stays suspended, on its new schedule, until `resume()`. A one-shot is live until
    /// its call returns: rescheduled while that call runs (from its handler or from another
    /// thread), it makes another call on its new schedule.
    public func reschedule(_ schedule: TimerSchedule) throws(TimerError) {
        try scheduler.reschedule(key, schedule) { [unowned(unsafe) self] _ in endedErrorLocked() }
    }

    /// Adds hooks that run around each of this timer's handler calls.
    public func addObserver(_ observer: TimerObserver) throws(TimerError) {
        try scheduler.addObserver(observer, to: key) { [unowned(unsafe) self] _ in endedErrorLocked() }
    }

    /// What an operation on its ended timer throws, under the scheduler's lock: unlike a key's
    /// error, it names the timer and how it ended, which the handle knows.
    private func endedErrorLocked() -> TimerError {
        .timerEnded(name: nameLocked(), state: endFacts.state)
    }

    /// The timer's name, under its scheduler's lock: once it has ended, the name it had.
    func nameLocked() -> String {
        guard endFacts.hasEnded else { return scheduler.nameLocked(slot, generation: generation) }
        if endFacts.hasCustomName, let name = EndedNames.name(of: self) { return name }
        return TimerRegistry.generatedName(scheduler.store.id(of: slot, generation: generation))
    }

    /// Learns, under its scheduler's lock, that its timer (`record`) has ended; `name` is the
    /// caller's name for it, if it had one.
    func learnEnd(of record: UnsafeMutablePointer<TimerRecord>, name: String?) {
        endFacts = EndFacts(fires: record.pointee.fires, cause: record.pointee.endCause, hasCustomName: name != nil)
        if let name { EndedNames.remember(name, for: self) }
    }

    /// Takes the final count of its ended timer (`record`) as its slot is given back: a last
    /// call whose target had gone was taken back.
    @inline(__always)
    func settleFinalCount(_ record: UnsafeMutablePointer<TimerRecord>) {
        guard endFacts.fires != record.pointee.fires else { return }
        endFacts = EndFacts(fires: record.pointee.fires, cause: record.pointee.endCause, hasCustomName: endFacts.hasCustomName)
    }

    public static func == (lhs: TimerHandle, rhs: TimerHandle) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String { "TimerHandle(\(name) on \(backendName))" }
}

/// What a handle learns when its timer ends, in one word: the fires (low 56 bits), why it ended
/// (its final state is the cause's, `EndCause.endedState`), and whether the timer had a name of
/// the caller's (kept in `EndedNames`, so that a handle stays small).
struct EndFacts: Equatable {
    let raw: UInt64

    static let live = EndFacts(raw: 0)

    private static let endedBit: UInt64 = 1 << 63
    private static let namedBit: UInt64 = 1 << 62

    init(raw: UInt64) { self.raw = raw }

    init(fires: Int, cause: EndCause, hasCustomName: Bool) {
        var raw = UInt64(clamping: max(0, fires)) & 0x00FF_FFFF_FFFF_FFFF
        raw |= UInt64(cause.rawValue & 0b111) << 56
        raw |= Self.endedBit
        if hasCustomName { raw |= Self.namedBit }
        self.raw = raw
    }

    var hasEnded: Bool { raw & Self.endedBit != 0 }
    var hasCustomName: Bool { raw & Self.namedBit != 0 }
    var fires: Int { Int(raw & 0x00FF_FFFF_FFFF_FFFF) }
    var cause: EndCause { EndCause(rawValue: UInt8((raw >> 56) & 0b111)) ?? .live }
    /// The final state; `.cancelled` while live (never read then: a live timer's is its record's).
    var state: TimerState { cause.endedState }
}

/// The caller's names of ended timers whose handles are still around: a handle answers its
/// name after the end without carrying a string itself. Entries go with their handles.
enum EndedNames {
    private static let names = Locked<[ObjectIdentifier: String]>([:])

    static func remember(_ name: String, for handle: TimerHandle) {
        names.withLock { $0[ObjectIdentifier(handle)] = name }
    }

    static func name(of handle: TimerHandle) -> String? {
        names.withLock { $0[ObjectIdentifier(handle)] }
    }

    static func forget(_ handle: TimerHandle) {
        _ = names.withLock { $0.removeValue(forKey: ObjectIdentifier(handle)) }
    }
}
