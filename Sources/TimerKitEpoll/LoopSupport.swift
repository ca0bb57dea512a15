import Glibc
import Synchronization
@_spi(BackendImplementation) import TimerKit

/// What a loop thread asked of the kernel: its waits, its re-arms of a native timer and the
/// reads it made. A test reads them to hold a backend to one re-arm per wake-up at the most; the
/// bench reads them to report system calls per wake-up.
package final class LoopCounts: Sendable {
    private let waitCount = Atomic<Int>(0)
    private let rearmCount = Atomic<Int>(0)
    private let readCount = Atomic<Int>(0)
    private let continuousRearmCount = Atomic<Int>(0)
    private let wallRearmCount = Atomic<Int>(0)
    private let fireCallCount = Atomic<Int>(0)

    package init() {}

    /// Calls of `fireDueTimers()` the loop made: one per wake-up that found a request due.
    package var fireCalls: Int { fireCallCount.load(ordering: .relaxed) }

    /// Waits that returned (`epoll_wait`, `epoll_pwait2`, `io_uring_enter`, a timerfd `read`).
    package var waits: Int { waitCount.load(ordering: .relaxed) }
    /// Re-arms of the native timer (`timerfd_settime`, an io_uring timeout added or moved) the
    /// loop thread made.
    package var rearms: Int { rearmCount.load(ordering: .relaxed) }
    /// Other system calls the loop thread made for a wake-up (a `read` of the timerfd).
    package var reads: Int { readCount.load(ordering: .relaxed) }

    /// Re-arms of a native timer on the continuous or wall clock itself (io_uring's
    /// `CLOCK_BOOTTIME` and `CLOCK_REALTIME` timeouts), which `rearms` does not count.
    package func rearms(on clock: DeadlineClock) -> Int {
        switch clock {
        case .monotonic: rearms
        case .continuous: continuousRearmCount.load(ordering: .relaxed)
        case .wall: wallRearmCount.load(ordering: .relaxed)
        }
    }

    // Only the loop thread adds, so a load and a store do: no read-modify-write on its path.
    @inline(__always) package func countWait() { waitCount.store(waitCount.load(ordering: .relaxed) &+ 1, ordering: .relaxed) }
    @inline(__always) package func countRearm() { rearmCount.store(rearmCount.load(ordering: .relaxed) &+ 1, ordering: .relaxed) }
    package func countRearm(on clock: DeadlineClock) {
        switch clock {
        case .monotonic: countRearm()
        case .continuous: continuousRearmCount.store(continuousRearmCount.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
        case .wall: wallRearmCount.store(wallRearmCount.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
        }
    }
    @inline(__always) package func countRead() { readCount.store(readCount.load(ordering: .relaxed) &+ 1, ordering: .relaxed) }
    @inline(__always) package func countFireCall() {
        fireCallCount.store(fireCallCount.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
    }
}

/// The scheduler's latest wake-up request to a loop of TimerKit's own (`.max`: nothing to wait
/// for), and the one rule every such loop keeps with it: a wake-up is used up as the loop calls
/// `fireDueTimers()` for it. That call asks again for whatever is still queued; a request kept
/// past it, when nothing is queued, would come due again at once and make the loop call
/// `fireDueTimers()` a second time for nothing.
package struct WakeRequest: ~Copyable {
    private let deadline = Atomic<UInt64>(.max)

    package init() {}

    /// The deadline last requested.
    @inline(__always) package var current: UInt64 { deadline.load(ordering: .relaxed) }

    /// Records the scheduler's request, replacing the last.
    @inline(__always) package func record(_ key: UInt64) { deadline.store(key, ordering: .relaxed) }

    /// The loop calls `fireDueTimers()` for this wake-up now (see the type).
    @inline(__always) package func useUp() { deadline.store(.max, ordering: .relaxed) }
}

/// The wake-up requests of a loop that sets its own wait: the scheduler's latest request, and
/// whether the loop sleeps and until when. The loop thread's own requests (made while it fires
/// timers) are only recorded, and it applies the last one as it goes to sleep; another thread's
/// request wakes the loop only when the loop sleeps past it. `FutexLock` rather than a
/// Synchronization.Mutex: ThreadSanitizer sees it. Uncontended (no other thread touching the
/// backend), a lock costs no system call.
package final class SleepGate: @unchecked Sendable {
    // @unchecked: `asleep` and `sleepingUntil` are read and written under `lock`; `requested` is
    // atomic, so that the loop's own requests (one a fire) need no lock.
    private let lock = FutexLock()
    private let requested = WakeRequest()
    private var asleep = false
    private var sleepingUntil: UInt64 = .max

    package init() {}

    /// Records the scheduler's request (`.max`: nothing to wait for) and says whether the
    /// caller must wake the loop: it sleeps, and past `deadline`.
    package func request(_ deadline: UInt64) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        requested.record(deadline)
        guard asleep, deadline < sleepingUntil else { return false }
        sleepingUntil = deadline  // a later request for the same wake-up needs no second signal
        return true
    }

    /// `request(_:)`, from the loop's own thread when `fromLoop`: the loop is awake then, so
    /// the request is only recorded, without the lock (the loop reads it as it goes to sleep).
    @inline(__always)
    package func request(_ deadline: UInt64, fromLoop: Bool) -> Bool {
        guard fromLoop else { return request(deadline) }
        requested.record(deadline)
        return false
    }

    /// Called by the loop as it goes to sleep: the deadline to sleep until (`.max`: until woken),
    /// or nil when the latest request has come by `now`. Then the loop fires at once instead of
    /// sleeping, and the request is used up (`WakeRequest`).
    package func goingToSleep(unlessDueBy now: UInt64) -> UInt64? {
        lock.lock()
        defer { lock.unlock() }
        let wanted = requested.current
        if wanted <= now {
            requested.useUp()
            return nil
        }
        asleep = true
        sleepingUntil = wanted
        return wanted
    }

    /// Called by the loop when its wait returns: requests made from now on are read before
    /// it sleeps again.
    package func awake() {
        lock.lock()
        asleep = false
        lock.unlock()
    }

    /// Called by the loop as it calls `fireDueTimers()` for a deadline its wait reached: the
    /// request is used up (`WakeRequest`).
    @inline(__always) package func useUp() { requested.useUp() }
}
