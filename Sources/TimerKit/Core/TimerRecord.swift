/// One timer, in a slot of its scheduler's store: 64 bytes, a cache line, holding what a
/// schedule, a cancel, a reset and a fire touch. What few timers use lives out of line, in
/// `TimerExtras` (a name, a tolerance, observers, a task) and in `TimerFireStats` (what a
/// snapshot reports of its fires), so that a plain timer costs one line and no allocation.
///
/// Guarded by the scheduler's lock. A free slot is all zeros but its generation (and, in
/// `orderSequence`, the next free slot): mapped memory that was never written reads as free
/// slots, so a chunk costs no memory until its slots are used.
struct TimerRecord {
    /// The next due grid point, on the timer's own clock.
    var deadline: UInt64 = 0
    /// The sequence number of the queue entry that stands for this timer; 0 when it has none
    /// (not queued: firing, suspended, ended). Any other entry of its slot is dead.
    var entrySequence: UInt64 = 0
    /// Its place among timers of equal deadline: the sequence of its latest queueing or reset
    /// (greater than `entrySequence` when a reset moved it later and its entry waits to be
    /// re-filed as it reaches the top). While the slot is free: the next free slot.
    var orderSequence: UInt64 = 0
    /// The repeat interval in ns; 0 for one-shots and calendar schedules.
    var interval: UInt64 = 0
    /// Handler calls so far.
    var fires: Int = 0
    /// Who is called when it fires: its `TimerHandle`, which holds the handler (a timer
    /// scheduled with a closure), or a `TimerCallback` (a timer scheduled with a key), told
    /// apart by `callbackKind`. Nil while the slot is free.
    var owner: AnyObject? = nil
    var extras: TimerExtras? = nil
    /// Bumped each time the slot is freed, so that a key or handle of an ended timer never
    /// finds the slot's next timer.
    var generation: UInt32 = 0
    /// The state (2 bits) and why it ended (3 bits).
    private var stateBits: UInt8 = 0
    /// The clock (2 bits), the missed-tick policy (2 bits), and whether a one-shot's call is
    /// still to come, and whether a count limits it (kept in `extras.remaining`).
    private var flags: UInt8 = 0
    /// 0: `owner` is a `TimerHandle`; otherwise the `TimerScheduler.CallbackKind` that calls it.
    var callbackKind: UInt8 = 0
    /// Calls of the handler under way (a handler that runs its loop nested can make two).
    var activeCalls: UInt8 = 0

    /// Moves `made`, a reference held +1, into the record of a slot just taken (whose owner is
    /// nil): the record keeps that reference, with no retain or release on the way.
    @inline(__always)
    mutating func adopt(owner made: Unmanaged<AnyObject>) {
        assert(owner == nil, "TimerRecord.adopt: the slot's owner is not nil")
        withUnsafeMutablePointer(to: &owner) { UnsafeMutableRawPointer($0).storeBytes(of: made, as: Unmanaged<AnyObject>.self) }
    }

    /// Fills the record of a slot just taken (free: all zeros but its generation and its link,
    /// `TimerStore.free`) for a timeout (`TimerScheduler.addTimeout`) queued as entry
    /// `sequence`: scheduled, one call left, owned by `owner` (+1, kept) of callback kind `kind`.
    /// Stores only, no read of the record: a slot taken from the end of a chunk, or freed a
    /// while ago, is not in the cache, and a store does not wait for its line as a read does
    /// (a read first made a million schedules 8-11 % slower).
    @inline(__always)
    mutating func startTimeout(at deadline: UInt64, policy: MissedTickPolicy, owner: Unmanaged<AnyObject>, kind: UInt8, sequence: UInt64) {
        assert(
            self.owner == nil && extras == nil && entrySequence == 0 && activeCalls == 0, "TimerRecord.startTimeout: the slot is not free")
        self.deadline = deadline
        entrySequence = sequence
        orderSequence = sequence
        interval = 0
        fires = 0
        withUnsafeMutablePointer(to: &self.owner) { UnsafeMutableRawPointer($0).storeBytes(of: owner, as: Unmanaged<AnyObject>.self) }
        startLive()
        // The monotonic clock (0), the policy, a one-shot's call left; no count, no stats.
        flags = policy.rawValue << 2 | Self.callLeftBit
        callbackKind = kind
    }

    /// `owner` without a retain, for a caller that the record keeps it alive for (a fire's
    /// call: the record keeps its owner while a call of it runs).
    @inline(__always)
    var unretainedOwner: Unmanaged<AnyObject>? {
        mutating get { withUnsafeMutablePointer(to: &owner) { UnsafeRawPointer($0).load(as: Unmanaged<AnyObject>?.self) } }
    }

    // The bits hold only raw values these setters wrote (a free slot's zeros are `.scheduled`
    // and `.live`), so they are read back without the checked `init(rawValue:)`.
    var state: TimerState {
        get { unsafeBitCast(stateBits & 0b11, to: TimerState.self) }
        set { stateBits = stateBits & ~0b11 | newValue.rawValue }
    }

    /// Why it ended (`.live` while it has not): its final state is this cause's
    /// (`EndCause.endedState`).
    var endCause: EndCause { unsafeBitCast(stateBits >> 2, to: EndCause.self) }

    /// Makes it live and scheduled.
    @inline(__always)
    mutating func startLive() { stateBits = TimerState.scheduled.rawValue | EndCause.live.rawValue << 2 }

    /// Ends it because of `cause`: the cause and the state it gives, in one store.
    @inline(__always)
    mutating func end(because cause: EndCause) {
        stateBits = cause.endedState.rawValue | cause.rawValue << 2
    }

    var clock: DeadlineClock {
        get {
            switch flags & 0b11 {
            case 1: .continuous
            case 2: .wall
            default: .monotonic
            }
        }
        set {
            let bits: UInt8 =
                switch newValue {
                case .monotonic: 0
                case .continuous: 1
                case .wall: 2
                }
            flags = flags & ~0b11 | bits
        }
    }

    var policy: MissedTickPolicy {
        get { MissedTickPolicy(rawValue: (flags >> 2) & 0b11) ?? .skip }
        set { flags = flags & ~0b1100 | newValue.rawValue << 2 }
    }

    private static let callLeftBit: UInt8 = 1 << 4
    private static let countedBit: UInt8 = 1 << 5
    private static let fireStatsBit: UInt8 = 1 << 6

    /// Whether its `TimerFireStats` were written since the slot was taken: until then they read
    /// as zeros, so a timer that never fires (nor waits on another clock) never touches their
    /// line.
    var hasFireStats: Bool {
        get { flags & Self.fireStatsBit != 0 }
        set { flags = newValue ? flags | Self.fireStatsBit : flags & ~Self.fireStatsBit }
    }

    /// Handler calls left: -1 for unlimited. A one-shot has one until its call; a count is kept
    /// in `extras` (few timers have one); any other schedule has no limit.
    var remaining: Int {
        if flags & Self.countedBit != 0 { return extras?.remaining ?? 0 }
        if interval == 0 && extras?.calendarRule == nil { return flags & Self.callLeftBit != 0 ? 1 : 0 }
        return -1
    }

    /// Sets the calls left, as a schedule resolved them (`count`: -1 for none, 1 for a
    /// one-shot's call). A count other than a one-shot's needs `extras`, which the caller made.
    mutating func setRemaining(_ count: Int) {
        flags &= ~(Self.callLeftBit | Self.countedBit)
        if interval == 0 && extras?.calendarRule == nil && count == 1 {
            flags |= Self.callLeftBit
        } else if count >= 0, let extras {
            extras.remaining = count
            flags |= Self.countedBit
        }
    }

    /// Whether setting `count` calls left needs `extras` (a count on a repeat or a calendar).
    static func needsExtras(forRemaining count: Int, interval: UInt64, calendar: Bool) -> Bool {
        count >= 0 && !(interval == 0 && !calendar && count == 1)
    }

    /// One call made (or, `undo`, one taken back: its target was gone).
    mutating func countCall(undo: Bool = false) {
        if flags & Self.countedBit != 0, let extras {
            if undo { extras.remaining += 1 } else if extras.remaining > 0 { extras.remaining -= 1 }
        } else if interval == 0 && extras?.calendarRule == nil {
            if undo { flags |= Self.callLeftBit } else { flags &= ~Self.callLeftBit }
        }
    }

    /// Forgets every call left: a calendar with no later date.
    mutating func endCalls() {
        flags &= ~Self.callLeftBit
        if flags & Self.countedBit != 0 { extras?.remaining = 0 }
    }
}

/// What a snapshot reports of a timer's fires, and the steps of its clock it has seen. In
/// memory mapped beside the records, which the kernel backs only once written: a store whose
/// timers never fire pays nothing for it.
struct TimerFireStats {
    static let zero = TimerFireStats(lastLateness: 0, maxLateness: 0, missedTicks: 0, clockSteps: 0)

    var lastLateness: UInt64
    var maxLateness: UInt64
    var missedTicks: UInt32
    /// The scheduler's count of steps of the timer's clock when it was last queued or fired: a
    /// fire that finds it behind says so (`Tick.clockChanged`).
    var clockSteps: UInt32
}

/// Fields few timers use, kept out of line so that a plain timer stays one line. Written and
/// read only under the scheduler's lock.
final class TimerExtras {
    /// The caller's name; nil for a generated one.
    var name: String?
    var tolerance: UInt64 = 0
    /// Handler calls left, when a count limits them (`TimerRecord.remaining`).
    var remaining = 0
    var observers: [TimerObserver] = []
    /// Run once the timer has ended and nothing of it runs any more (`whenEnded`).
    var endWaiters: [EndWaiter] = []
    /// The handler starts a task (`scheduleAsync`): a repeat is re-queued when the task
    /// returns (fixed delay), not when the handler does.
    var runsTasks = false
    /// Tasks of this timer that have started and not returned.
    var tasksRunning = 0
    /// The running task, cancelled when the timer ends.
    var runningTask: Task<Void, Never>?
    /// A reschedule while a task ran: its first deadline stands when the task returns.
    var rescheduledDuringTask = false
    /// The `Debouncer` or `Throttler` whose timer this is (weak: the helper owns the timer).
    /// Read only by `TimerScheduler.helper(of:)`, which hands it out of the lock: a strong
    /// reference taken from it must never be the last one released under the lock.
    weak var helper: AnyObject?
    /// The most each fire is jittered by (ns), and this fire's draw: it is due at
    /// `deadline + jitterOffset`.
    var jitter: UInt64 = 0
    var jitterOffset: UInt64 = 0
    /// Suspended, not finished, after its last call (a helper's timer): the helper's next
    /// call moves and resumes it, so a burst of calls reuses one timer.
    var parksAfterLastCall = false
    /// The dates of a calendar schedule; its next deadline is found as it fires.
    var calendarRule: CalendarRule?
    /// The target of a target-action timer, held weakly (see `WeakReference` about loading it).
    var target: WeakReference?
    /// The handle of a timer scheduled with a key, made when someone asked for one (a lookup
    /// by name): every later lookup gets the same.
    var handle: TimerHandle?

    init() {}
}

/// An action to run once a timer has ended and gone idle, and the token that takes it back.
struct EndWaiter {
    let token: UInt64
    let action: @Sendable () -> Void
}
