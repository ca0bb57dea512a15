/// What a backend supplies to the core besides its clock: its native wake-up.
///
/// A backend owns one `TimerScheduler` and implements this protocol. The scheduler keeps
/// every timer, the ordering, the state machine and the repeat arithmetic; the driver only
/// wakes the loop and calls `TimerScheduler.fireDueTimers()` there. This keeps every
/// backend's semantics identical and lets a comparison measure just the wake-up mechanism.
///
/// ## Threading rules
///
/// `wake(at:)` is called **with the scheduler's lock held**, from any thread: the loop's own
/// (re-arming after a fire) or any other (a `schedule`, `resume` or `cancel` there). So it:
/// - never blocks and never waits for the loop (no `event_del` that waits for a running
///   callback, no `queue.sync`, no join): the loop may be waiting for this very lock;
/// - never calls back into the scheduler, the registry or user code;
/// - only records or arms the request, and returns.
///
/// A wake-up is used up once it has made the loop call `fireDueTimers()`: the scheduler asks
/// for the next one when something is left to wait for. A driver that records requests forgets
/// the one it acts on, or its loop would call `fireDueTimers()` again and again.
///
/// Deadlines it is given are below `MonotonicInstant.horizon` (2^62 ns, about 146 years of
/// uptime), which every native timer represents; later deadlines never come and arrive as
/// `.distantFuture`, which means "disarm".
@_spi(BackendImplementation) public protocol TimerDriver: AnyObject, Sendable {
    /// Arranges for `fireDueTimers()` to run on the loop at `deadline` (or as soon as
    /// possible when it is past); `.distantFuture` disarms. Replaces any earlier request.
    /// Throws when the native mechanism refuses (e.g. libevent's `event_add` returning -1):
    /// the scheduler undoes the change that needed it, or, inside the loop, stops with it.
    func wake(at deadline: MonotonicInstant) throws(TimerError)
}

/// A driver whose native timers run on the continuous and wall clocks too (io_uring's
/// `IORING_TIMEOUT_BOOTTIME` and `IORING_TIMEOUT_REALTIME`): the scheduler then gives it those
/// clocks' earliest deadlines on their own clocks, not converted to the monotonic one, and the
/// kernel keeps them through a suspend or a step of the wall clock. `wake(at:)` carries the
/// monotonic queue's deadline alone. Taken only from a driver the scheduler owns
/// (`attach(owning:)`), on a scheduler that reads the kernel's clocks.
///
/// The threading rules are `TimerDriver`'s, but a request on these clocks stands until the
/// next one: it is always a queue's first entry, which `fireDueTimers()` takes out once it is
/// due on its clock (and a kernel timer on that clock has expired only once it is), so the
/// driver keeps its timer armed for it, even when a wake-up expired it: a burst cut short at
/// 4096 fires then gets its next wake-up at once. After a step of a clock
/// (`clockMayHaveChanged()`) the scheduler asks again, with deadlines that may be the same:
/// the driver looks at its timers again then.
package protocol OwnClockTimerDriver: TimerDriver {
    /// Arranges for `fireDueTimers()` to run on the loop when `clock` (`.continuous` or
    /// `.wall`) reads `nanoseconds` (`.max`: disarms that clock's timer). Replaces the clock's
    /// earlier request. It only records the request, for the loop to arm: a native timer that
    /// refuses is the loop's failure, which shuts the scheduler down with it.
    func wake(on clock: DeadlineClock, at nanoseconds: UInt64)
}
