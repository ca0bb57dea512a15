import Testing
@_spi(BackendImplementation) import TimerKit

extension ConformanceCheck {
    /// How late a backend on real time may run something after it was due and still pass a
    /// check: 500 ms.
    ///
    /// Every check that measures when something happened — a handler's start, a sleep's end, a
    /// display frame — holds a real-time backend to this bound as well as to "never early". A
    /// backend that runs everything a second late, or reads milliseconds as seconds, fails them.
    ///
    /// The value is generous on purpose. A loop's own wake-up takes tens of microseconds, but
    /// the checks run in parallel, and on a busy machine a loop thread waits for a core. On the
    /// 2-core VM TimerKit is tested on, running all the checks on each of its backends beside
    /// two CPU-bound processes and other builds (a load average near 25), most things ran
    /// within 50 ms of their time; the latest was 358 ms late, a Dispatch timer, whose fire
    /// passes from Dispatch's event thread to a worker thread. 500 ms leaves room above that,
    /// and still fails a backend that is a second late by half a second.
    ///
    /// Lateness is measured from the later of when a thing was due and when the backend could
    /// first run it (the call before it returned, or a tick sequence's consumer asked for the
    /// next tick), and what a check makes late on purpose (a tolerance) is allowed on top. A
    /// run that sets the watchdogs' `TIMERKIT_WATCHDOG_SCALE` above 1 (TimerKit's sanitizer
    /// runs, several times slower) multiplies the bound by it too. On virtual time
    /// (``BackendUnderTest/manual``) there is no bound to allow for: things happen exactly when
    /// due, plus what the check made them late by.
    public static let latenessBound: Duration = .milliseconds(500)

    /// ``latenessBound`` as this run applies it.
    package static var appliedLatenessBound: Duration { latenessBound * max(1, Watchdog.scale) }
}

/// Records an issue when `what`, due at `due`, happened before it, or later than it may: on
/// real time, `allowance` (what the check made it late by) plus the lateness bound; on virtual
/// time, `allowance` alone, to the nanosecond.
func expectOnTime(
    _ what: @autoclosure () -> String, due: MonotonicInstant, happened: MonotonicInstant, allowing allowance: Duration = .zero,
    on kind: BackendUnderTest, sourceLocation: SourceLocation = #_sourceLocation
) {
    let late = happened - due
    #expect(late >= .zero, "\(what()) happened \(.zero - late) before it was due", sourceLocation: sourceLocation)
    expectNotLate(what(), by: late, allowing: allowance, on: kind, sourceLocation: sourceLocation)
}

/// Records an issue when a handler call came before its scheduled time, or later than it may
/// after it first came due: its grid point before the `missed` ones it was too late for, or,
/// if later, `notBefore` (when the call before it returned, or a sequence's consumer asked for
/// it: a call cannot start before). On virtual time its lateness is at most `allowance`; on
/// real time `allowance` plus the lateness bound.
func expectOnTime(
    _ tick: Tick, _ what: @autoclosure () -> String? = nil, notBefore earliest: MonotonicInstant? = nil,
    allowing allowance: Duration = .zero, on kind: BackendUnderTest, sourceLocation: SourceLocation = #_sourceLocation
) {
    let name = what() ?? "tick \(tick.index)"
    #expect(
        tick.actual >= tick.scheduled, "\(name) began \(.zero - tick.lateness) before its scheduled time", sourceLocation: sourceLocation)
    let firstDue = tick.scheduled + (.zero - (tick.interval ?? .zero) * tick.missed)
    let due = max(firstDue, earliest ?? firstDue)
    expectNotLate(name, by: max(tick.actual - due, .zero), allowing: allowance, on: kind, sourceLocation: sourceLocation)
}

private func expectNotLate(
    _ what: String, by late: Duration, allowing allowance: Duration, on kind: BackendUnderTest, sourceLocation: SourceLocation
) {
    if kind.isRealTime {
        let limit = allowance + ConformanceCheck.appliedLatenessBound
        #expect(
            late <= limit,
            "\(what) happened \(late) after it was due: later than \(allowance == .zero ? "" : "the \(allowance) this check allows plus ")the \(ConformanceCheck.appliedLatenessBound) of ConformanceCheck.latenessBound",
            sourceLocation: sourceLocation)
    } else {
        #expect(
            late <= allowance, "\(what) happened \(late) after it was due, on virtual time (allowed: \(allowance))",
            sourceLocation: sourceLocation)
    }
}
