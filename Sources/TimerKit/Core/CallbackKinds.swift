/// The callback types of a scheduler's timers scheduled with a key, each named by a byte in
/// its timers' records (its kind: 1-based, 0 being a `TimerHandle`), so that a record holds its
/// callback as one plain reference and a call through it needs no closure.
///
/// A type's entry is written once, under the scheduler's lock, before any record holds its
/// kind, and never changes or moves: a kind read under the lock may be looked up after
/// unlocking.
final class CallbackKinds: @unchecked Sendable {
    // @unchecked: `types` entries are written once under the scheduler's lock before any record
    // names them and are immutable after; `count` and `last` are touched only under that lock.

    /// The most callback types one backend's timers may have.
    static let capacity = 255

    private var types: UnsafeMutablePointer<any TimerCallback.Type>?
    private var count = 0
    private var last: (type: ObjectIdentifier, kind: UInt8)?

    deinit { types?.deallocate() }

    /// The kind of `Callback`, made on its first timer. Under the scheduler's lock.
    /// - Throws: `TimerError.invalidOption` past `capacity` types.
    @inline(__always)
    func kind<Callback: TimerCallback>(of type: Callback.Type) throws(TimerError) -> UInt8 {
        let id = ObjectIdentifier(type)
        if let last, last.type == id { return last.kind }
        return try lookUp(type)
    }

    private func lookUp(_ type: any TimerCallback.Type) throws(TimerError) -> UInt8 {
        let id = ObjectIdentifier(type)
        let types = self.types ?? .allocate(capacity: Self.capacity)
        self.types = types
        var index = 0
        while index < count, ObjectIdentifier(types[index]) != id { index += 1 }
        if index == count {
            guard count < Self.capacity else {
                throw .invalidOption(
                    name: "callback", value: "\(type)", allowed: "at most \(Self.capacity) callback types per backend")
            }
            (types + count).initialize(to: type)
            count += 1
        }
        let kind = UInt8(index + 1)
        last = (id, kind)
        return kind
    }

    /// The callback type of `kind` (not 0). Safe without the lock (see the type).
    @inline(__always)
    subscript(kind: UInt8) -> any TimerCallback.Type { types.unsafelyUnwrapped[Int(kind) - 1] }

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
