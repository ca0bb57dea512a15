import CTimerShims
import Glibc
import Synchronization

/// The process's one watcher of the wall clock, for every scheduler with timers on the
/// continuous or wall clock: a thread blocked reading a `CLOCK_REALTIME` timerfd armed for
/// the far future with `TFD_TIMER_CANCEL_ON_SET`. The kernel ends that read with `ECANCELED`
/// when the wall clock is set, and when the machine resumes from a suspend; the watcher then
/// asks each scheduler to check its clocks' offsets (`clockMayHaveChanged`), outside its own
/// lock, and arms the timerfd again.
///
/// The thread starts with the first such timer and lives as long as the process. A scheduler
/// registers once, with its first timer on those clocks, and unregisters when it shuts down,
/// or as it goes if it never shut down. The watcher holds its link (`SchedulerLink`), which
/// keeps the scheduler only while it has live timers: the watcher keeps no scheduler alive.
package final class ClockWatcher: @unchecked Sendable {
    // @unchecked: `schedulers`, `state` and `injectedCancels` are guarded by `mutex`;
    // `descriptor` is written once, under it, before the thread starts.

    package static let shared = ClockWatcher()

    /// A scheduler's link, from its first timer on those clocks until it shuts down or goes
    /// (`unwatch`).
    private struct Watched {
        let link: SchedulerLink
    }

    package enum State: Equatable {
        case idle
        case watching
        /// The timerfd could not be made or armed: changes are seen only when a loop wakes.
        case failed(TimerError)
    }

    private let mutex = FutexLock()
    private var schedulers: [ObjectIdentifier: Watched] = [:]
    private var state = State.idle
    private var descriptor: Int32 = -1
    /// Reads to report as `ECANCELED` whatever the kernel said (tests: a step of the host's
    /// clock cannot be made in a test).
    private var injectedCancels = 0
    /// Changes seen so far (each an `ECANCELED`), for tests.
    private var changesSeen = 0

    /// Starts watching for `scheduler` (idempotent); the first call starts the thread.
    func watch(_ scheduler: TimerScheduler) {
        mutex.lock()
        schedulers[ObjectIdentifier(scheduler)] = Watched(link: scheduler.link)
        let start = state == .idle
        if start { state = .watching }
        mutex.unlock()
        guard start else { return }
        do throws(TimerError) {
            let fd = try Self.makeDescriptor()
            mutex.withLock { descriptor = fd }
            var thread = pthread_t()
            let context = Unmanaged.passRetained(self).toOpaque()
            let rc = pthread_create(
                &thread, nil,
                { context in
                    guard let context else { return nil }
                    Unmanaged<ClockWatcher>.fromOpaque(context).takeRetainedValue().run()
                    return nil
                }, context)
            if rc != 0 {
                Unmanaged<ClockWatcher>.fromOpaque(context).release()
                throw .systemCall(call: "pthread_create", errno: rc)
            }
            pthread_detach(thread)
        } catch {
            mutex.withLock { state = .failed(error) }
        }
    }

    /// Stops watching for `scheduler` (it has shut down, or is going).
    func unwatch(_ scheduler: TimerScheduler) {
        _ = mutex.withLock { schedulers.removeValue(forKey: ObjectIdentifier(scheduler)) }
    }

    /// Whether it watches for `scheduler`, for tests.
    package func isWatching(_ scheduler: TimerScheduler) -> Bool {
        mutex.withLock { schedulers[ObjectIdentifier(scheduler)]?.link === scheduler.link }
    }

    /// What the watcher is doing.
    package var currentState: State { mutex.withLock { state } }

    /// How many changes it has seen.
    package var changes: Int { mutex.withLock { changesSeen } }

    /// Makes the next read report `ECANCELED`, as a step of the wall clock would, and wakes
    /// the thread for it (by arming the timerfd for a moment already past). For tests.
    package func injectCancel() throws(TimerError) {
        let fd = mutex.withLock {
            injectedCancels += 1
            return descriptor
        }
        guard fd >= 0 else { throw .nativeFailure(backend: "clock watcher", call: "watch (not started)") }
        var spec = itimerspec(it_interval: timespec(), it_value: timespec(tv_sec: 1, tv_nsec: 0))
        if timerfd_settime(fd, Int32(TFD_TIMER_ABSTIME), &spec, nil) != 0 { throw .systemCall(call: "timerfd_settime", errno: errno) }
    }

    private static func makeDescriptor() throws(TimerError) -> Int32 {
        let fd = timerfd_create(CLOCK_REALTIME, Int32(TFD_CLOEXEC))
        if fd < 0 { throw .systemCall(call: "timerfd_create", errno: errno) }
        do throws(TimerError) { try arm(fd) } catch {
            close(fd)
            throw error
        }
        return fd
    }

    /// Arms `fd` for a wall-clock time centuries away, to be cancelled when the clock is set.
    private static func arm(_ fd: Int32) throws(TimerError) {
        var spec = itimerspec(it_interval: timespec(), it_value: timespec(tv_sec: 9_000_000_000, tv_nsec: 0))
        let flags = Int32(TFD_TIMER_ABSTIME) | Int32(TFD_TIMER_CANCEL_ON_SET)
        if timerfd_settime(fd, flags, &spec, nil) != 0 { throw .systemCall(call: "timerfd_settime", errno: errno) }
    }

    private func run() {
        let fd = mutex.withLock { descriptor }
        while true {
            var expirations: UInt64 = 0
            let count = read(fd, &expirations, 8)
            let failure = count < 0 ? errno : 0
            if failure == EINTR { continue }
            let injected = mutex.withLock {
                guard injectedCancels > 0 else { return false }
                injectedCancels -= 1
                return true
            }
            guard failure == ECANCELED || injected else {
                if failure == 0 { continue }  // an expiry: only an injection arms it that early
                mutex.withLock { state = .failed(.systemCall(call: "read", errno: failure)) }
                return
            }
            do throws(TimerError) { try Self.arm(fd) } catch {
                mutex.withLock { state = .failed(error) }
                return
            }
            let watched = mutex.withLock {
                changesSeen += 1
                return schedulers.values.map(\.link)
            }
            // A scheduler with no live timer has none on those clocks either: nothing to tell.
            for link in watched { link.scheduler?.clockMayHaveChanged() }
        }
    }
}
