import Dispatch
import Foundation
import Testing
import TimerKit

// Timeouts held either way (by key or by handle) and what they did, for tests that run the same
// steps on both paths, and a watchdog and a seeded generator for them.

/// How a timer is held.
package enum TimerPath: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case key, handle
    package var testDescription: String { rawValue }
}

/// A timer held by key or by handle.
package enum HeldTimer: Sendable {
    case key(TimerKey)
    case handle(TimerHandle)
}

/// What timers did: each call (by tag) and each end (by tag, with reason and fire count).
package final class TimerLog: Sendable {
    package struct Fire: Sendable {
        package let tag: Int
        package let index: Int
        package let scheduled: MonotonicInstant
        package let actual: MonotonicInstant
        /// `MonotonicInstant.now()` read in the handler.
        package let seen: MonotonicInstant
        /// The thread the handler ran on.
        package let thread: UInt
    }

    package struct End: Sendable, Equatable {
        package let tag: Int
        package let reason: TimerEndReason
        package let fires: Int

        package init(tag: Int, reason: TimerEndReason, fires: Int) {
            self.tag = tag
            self.reason = reason
            self.fires = fires
        }
    }

    private let state = Locked<(fires: [Fire], ends: [End])>(([], []))

    package init() {}

    package func fired(_ tag: Int, index: Int = 0, scheduled: MonotonicInstant, actual: MonotonicInstant) {
        let fire = Fire(tag: tag, index: index, scheduled: scheduled, actual: actual, seen: .now(), thread: UInt(pthread_self()))
        state.withLock { $0.fires.append(fire) }
    }

    package func ended(_ tag: Int, _ reason: TimerEndReason, fires: Int) {
        state.withLock { $0.ends.append(End(tag: tag, reason: reason, fires: fires)) }
    }

    package var fires: [Fire] { state.current.fires }
    package var firedTags: [Int] { fires.map(\.tag) }
    package var ends: [End] { state.current.ends }
    package var endCount: Int { state.withLock { $0.ends.count } }
    package var fireCount: Int { state.withLock { $0.fires.count } }
    package func ends(of tag: Int) -> [End] { ends.filter { $0.tag == tag } }
    package func fireCount(of tag: Int) -> Int { fires.filter { $0.tag == tag }.count }
}

/// A callback for one timer (tag) that logs into `log`, with optional hooks.
package final class LoggingCallback: TimerCallback, Sendable {
    package let tag: Int
    package let log: TimerLog
    private let onFire: (@Sendable (TimerFire) -> Void)?
    private let onEnded: (@Sendable (TimerKey, TimerEndReason, Int) -> Void)?
    private let onDeinit: (@Sendable () -> Void)?

    package init(
        tag: Int, log: TimerLog, onFire: (@Sendable (TimerFire) -> Void)? = nil,
        onEnded: (@Sendable (TimerKey, TimerEndReason, Int) -> Void)? = nil, onDeinit: (@Sendable () -> Void)? = nil
    ) {
        self.tag = tag
        self.log = log
        self.onFire = onFire
        self.onEnded = onEnded
        self.onDeinit = onDeinit
    }

    package func timerFired(_ fire: TimerFire) {
        log.fired(tag, index: fire.index, scheduled: fire.scheduled, actual: fire.actual)
        onFire?(fire)
    }

    package func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) {
        log.ended(tag, reason, fires: fires)
        onEnded?(key, reason, fires)
    }

    deinit { onDeinit?() }
}

extension TimerBackend {
    /// A timeout `.after(delay)` held `path`'s way, logging under `tag` into `log`.
    package func scheduleTimeout(
        _ delay: Duration, tag: Int, path: TimerPath, log: TimerLog, onFire: (@Sendable () -> Void)? = nil
    ) throws(TimerError) -> HeldTimer {
        switch path {
        case .key:
            var fireHook: (@Sendable (TimerFire) -> Void)? = nil
            if let onFire { fireHook = { _ in onFire() } }
            return .key(try schedule(.after(delay), calling: LoggingCallback(tag: tag, log: log, onFire: fireHook)))
        case .handle:
            let handle = try schedule(.after(delay)) { tick in
                log.fired(tag, index: tick.index, scheduled: tick.scheduled, actual: tick.actual)
                onFire?()
            }
            handle.onEnd { [handle] reason in log.ended(tag, reason, fires: handle.fireCount) }
            return .handle(handle)
        }
    }

    package func cancel(held: HeldTimer) {
        switch held {
        case let .key(key): cancel(key)
        case let .handle(handle): handle.cancel()
        }
    }

    package func reschedule(held: HeldTimer, after delay: Duration) throws(TimerError) {
        switch held {
        case let .key(key): try reschedule(key, .after(delay))
        case let .handle(handle): try handle.reschedule(.after(delay))
        }
    }

    package func suspend(held: HeldTimer) throws(TimerError) {
        switch held {
        case let .key(key): try suspend(key)
        case let .handle(handle): try handle.suspend()
        }
    }

    package func resume(held: HeldTimer) throws(TimerError) {
        switch held {
        case let .key(key): try resume(key)
        case let .handle(handle): try handle.resume()
        }
    }

    package func isActive(held: HeldTimer) -> Bool {
        switch held {
        case let .key(key): isActive(key)
        case let .handle(handle): handle.isActive
        }
    }
}

/// Whether `error` is what a call through an ended timer throws: `TimerError.timerEnded` with
/// `state` (any name) through a handle, `TimerError.keyEnded` through a key.
package func isTimerEnded(_ error: any Error, state: TimerState? = nil) -> Bool {
    switch error as? TimerError {
    case let .timerEnded(_, ended)?: state.map { $0 == ended } ?? true
    case .keyEnded?: true
    default: false
    }
}

/// Whether `error` is exactly what a call through `held`, whose timer ended in `state`, throws:
/// `TimerError.keyEnded` naming the key, or `TimerError.timerEnded` with that state.
package func isEndedError(_ error: any Error, of held: HeldTimer, state: TimerState) -> Bool {
    switch (held, error as? TimerError) {
    case let (.key(key), .keyEnded(ended)?): ended == key
    case let (.handle, .timerEnded(_, ended)?): ended == state
    default: false
    }
}

/// Runs `body` on a thread of its own and waits at most `seconds` for it: a hang or deadlock
/// records an issue (and leaves the thread behind) instead of hanging the run. Returns the
/// body's result, or nil after a time-out; assertions go after it, on the test's thread.
package func runUnderWatchdog<T: Sendable>(
    _ seconds: Double = 10, _ what: String, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () throws -> T
) throws -> T? {
    let result = Locked<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    let thread = Thread {
        let outcome = Result { try body() }
        result.withLock { $0 = outcome }
        done.signal()
    }
    thread.stackSize = 8 << 20
    thread.start()
    guard done.wait(timeout: .now() + seconds) == .success else {
        Issue.record("watchdog: \(what) did not finish within \(seconds) s (hang or deadlock)", sourceLocation: sourceLocation)
        return nil
    }
    return try result.current?.get()
}

/// Polls `condition` every millisecond for at most `seconds` of real time; whether it came true.
package func poll(for seconds: Double, until condition: () -> Bool) -> Bool {
    let end = MonotonicInstant.now() + .milliseconds(Int64(seconds * 1000))
    while MonotonicInstant.now() < end {
        if condition() { return true }
        usleep(1000)
    }
    return condition()
}

/// A seeded generator (SplitMix64), so that a failure reproduces.
package struct SplitMix64 {
    private var state: UInt64

    package init(state: UInt64) { self.state = state }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    package mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}

/// Runs `body` on a thread of its own and says whether it returned within `seconds`: a hang
/// fails the test instead of holding it (the thread is left behind).
package func returns(within seconds: Int = 20, _ body: @escaping @Sendable () -> Void) -> Bool {
    let done = DispatchSemaphore(value: 0)
    onBackgroundThread {
        body()
        done.signal()
    }
    return done.wait(timeout: .now() + .seconds(seconds)) == .success
}
