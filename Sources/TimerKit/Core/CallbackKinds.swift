import Synchronization

/// The callback types of a scheduler's timers scheduled with a key, each named by a byte in
/// its timers' records (its kind: 1-based, 0 being a `TimerHandle`), so that a record holds its
/// callback as one plain reference and a call through it needs no closure.
///
/// A type's entry is written once, under the scheduler's lock, and then published (`published`
/// is stored with release ordering after it): an entry below the published count is never
/// written again, so it may be read without the lock, and a schedule finds its callback's kind
/// before it locks.
final class CallbackKinds: @unchecked Sendable {
    // @unchecked: `types` is allocated before any entry is published and never moves; an
    // entry is written once under the scheduler's lock before `published` (an atomic stored
    // with release ordering) counts it, and readers load `published` with acquire ordering
    // and read only entries below it.

    /// The most callback types one backend's timers may have.
    static let capacity = 255

    private let types: UnsafeMutablePointer<any TimerCallback.Type>
    private let published = Atomic<Int>(0)

    init() { types = .allocate(capacity: Self.capacity) }

    deinit {
        types.deinitialize(count: published.load(ordering: .acquiring))
        types.deallocate()
    }

    /// The kind of `type`, if one of this scheduler's timers has had it. Safe without the lock.
    @inline(__always)
    func existingKind(of type: any TimerCallback.Type) -> UInt8? {
        let id = ObjectIdentifier(type)
        let count = published.load(ordering: .acquiring)
        var index = 0
        while index < count {
            if ObjectIdentifier(types[index]) == id { return UInt8(index + 1) }
            index += 1
        }
        return nil
    }

    /// The kind of `type`, made on its first timer. Under the scheduler's lock.
    /// - Throws: `TimerError.invalidOption` past `capacity` types.
    func kindLocked(of type: any TimerCallback.Type) throws(TimerError) -> UInt8 {
        if let kind = existingKind(of: type) { return kind }
        let count = published.load(ordering: .relaxed)
        guard count < Self.capacity else {
            throw .invalidOption(
                name: "callback", value: "\(type)", allowed: "at most \(Self.capacity) callback types per backend")
        }
        (types + count).initialize(to: type)
        published.store(count + 1, ordering: .releasing)
        return UInt8(count + 1)
    }

    /// The callback type of `kind` (not 0), a kind a record holds. Safe without the lock (see
    /// the type).
    @inline(__always)
    subscript(kind: UInt8) -> any TimerCallback.Type { types[Int(kind) - 1] }

    /// Calls `callback`'s `timerFired`; `kind` is its type's.
    func fire(_ callback: AnyObject, kind: UInt8, _ fire: TimerFire) {
        Self.fire(self[kind], callback, fire)
    }

    /// Calls `callback`'s `timerEnded`; `kind` is its type's.
    func ended(_ callback: AnyObject, kind: UInt8, _ key: TimerKey, reason: TimerEndReason, fires: Int) {
        Self.ended(self[kind], callback, key, reason: reason, fires: fires)
    }

    private static func fire<Callback: TimerCallback>(_: Callback.Type, _ callback: AnyObject, _ fire: TimerFire) {
        unsafeDowncast(callback, to: Callback.self).timerFired(fire)
    }

    private static func ended<Callback: TimerCallback>(
        _: Callback.Type, _ callback: AnyObject, _ key: TimerKey, reason: TimerEndReason, fires: Int
    ) {
        unsafeDowncast(callback, to: Callback.self).timerEnded(key, reason: reason, fires: fires)
    }
}

/// The callback of a handle's timer when its scheduler keeps handles' timers as timers with a
/// key (`TimerScheduler.keepsHandlesAsKeyedTimers`): it calls the handle's handler, and lets go
/// of it when the timer has ended, as a handle's timer does.
final class HandleCallback: TimerCallback {
    let handle: TimerHandle

    init(_ handle: TimerHandle) { self.handle = handle }

    func timerFired(_ fire: TimerFire) {
        handle.handler(
            Tick(
                index: fire.index, scheduled: fire.scheduled, actual: fire.actual, missed: fire.missed, interval: fire.interval,
                clock: fire.clock, clockChanged: fire.clockChanged, timer: handle))
    }

    func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) { handle.letGoOfHandler() }
}
