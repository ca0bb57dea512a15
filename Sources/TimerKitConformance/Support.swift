import Dispatch
import Foundation
import Glibc
import Testing
@_spi(BackendImplementation) import TimerKit

/// Milliseconds, for brevity in tests.
package func ms(_ value: Int) -> Duration { .milliseconds(value) }

/// Records ticks from handlers that run on other threads.
package final class TickLog: Sendable {
    private let ticks = Locked<[Tick]>([])
    private let returns = Locked<[Int: MonotonicInstant]>([:])
    package init() {}
    package func record(_ tick: Tick) { ticks.withLock { $0.append(tick) } }
    package var all: [Tick] { ticks.current }
    package var count: Int { ticks.current.count }
    /// Records when the handler call of `tick` returned: its timer's next call cannot start before.
    package func recordReturn(of tick: Tick, at instant: MonotonicInstant) { returns.withLock { $0[tick.index] = instant } }
    /// When the call before `tick` returned, if it was recorded.
    package func returnOfCall(before tick: Tick) -> MonotonicInstant? { returns.withLock { $0[tick.index - 1] } }
}

/// A counter shared with handlers.
package final class Counter: Sendable {
    private let value = Locked(0)
    package init() {}
    package func increment() { value.withLock { $0 += 1 } }
    /// Adds one and returns the new count.
    package func incrementAndGet() -> Int {
        value.withLock {
            $0 += 1
            return $0
        }
    }
    package var current: Int { value.current }
}

/// Blocks the calling thread for `duration` of real time (a busy handler, or a pause in a
/// real-time test whose bounds are generous).
package func blockRealTime(_ duration: Duration) {
    _ = DispatchSemaphore(value: 0).wait(timeout: .now() + .nanoseconds(Int(duration.saturatingNanoseconds)))
}

/// Polls `condition` every 2 ms of real time until it holds or `timeout` passes (times the
/// watchdogs' `TIMERKIT_WATCHDOG_SCALE`: sanitized runs are that much slower).
@discardableResult
package func waitFor(_ timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
    let deadline = MonotonicInstant.now() + timeout * Watchdog.scale
    while !condition() {
        if MonotonicInstant.now() > deadline { return false }
        blockRealTime(.milliseconds(2))
    }
    return true
}

/// Polls `condition` every 2 ms until it holds or `timeout` passes (scaled as `waitFor`'s),
/// suspending (not blocking) in between.
package func waitForAsync(_ timeout: Duration = .seconds(10), _ condition: @Sendable () -> Bool) async -> Bool {
    let deadline = MonotonicInstant.now() + timeout * Watchdog.scale
    while !condition() {
        if MonotonicInstant.now() > deadline { return false }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return true
}

/// `onThreads` for async tests: waits for the threads without holding a thread of the
/// cooperative pool.
package func onThreadsAsync(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        Thread.detachNewThread {
            onThreads(count, body)
            continuation.resume()
        }
    }
}

/// Runs `body` on a new thread and waits for it to return.
package func onNewThread(_ body: @escaping @Sendable () -> Void) {
    onThreads(1) { _ in body() }
}

/// Runs `body` on a new thread and returns at once. Tests use threads of their own rather
/// than the global Dispatch queues: those are as wide as the machine has cores (2 here), and
/// with other tests blocking their workers a queued block may not start for seconds.
package func onBackgroundThread(_ body: @escaping @Sendable () -> Void) {
    Thread.detachNewThread(body)
}

/// Runs `body(index)` on `count` new threads at once and waits until all have returned.
package func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let done = DispatchSemaphore(value: 0)
    for index in 0..<count {
        Thread.detachNewThread {
            body(index)
            done.signal()
        }
    }
    for _ in 0..<count { done.wait() }
}

/// Fails a hung test in seconds instead of at CI's time limit: unless disarmed within
/// `seconds`, it prints what hung and ends the test process. A hang is the defect these
/// tests exist to catch, and a stuck thread cannot be cancelled, so the run must end.
package final class Watchdog: Sendable {
    private let disarmed = DispatchSemaphore(value: 0)
    private let done = Locked(false)

    /// How much longer every watchdog waits: `TIMERKIT_WATCHDOG_SCALE` (the sanitizer runs set
    /// 4). Under ThreadSanitizer the whole suite, every test started at once on two cores, takes
    /// about 25 s, so a test that waits its turn can pass 30 s without hanging. Below 1 it
    /// shortens them: a test of the watchdog itself sets it in a child process.
    static let scale: Double = {
        guard let text = ProcessInfo.processInfo.environment["TIMERKIT_WATCHDOG_SCALE"], let scale = Double(text), scale > 0, scale.isFinite
        else {
            return 1
        }
        return scale
    }()

    /// Arms a watchdog for the test running now (or `what`).
    package init(_ what: String? = nil, seconds: Double = 30) {
        let name = what ?? Test.current.map { "\($0.name)" } ?? "a test"
        let seconds = seconds * Self.scale
        let disarmed = self.disarmed
        Thread.detachNewThread {
            if disarmed.wait(timeout: .now() + .nanoseconds(Int(seconds * 1e9))) == .timedOut {
                let wantsBacktrace = ProcessInfo.processInfo.environment["TIMERKIT_WATCHDOG_ABORT"] == "1"
                let message = """

                    WATCHDOG: \(name) did not finish within \(seconds) s: it hung. Ending the test run\
                    \(wantsBacktrace ? " with abort()." : " (TIMERKIT_WATCHDOG_ABORT=1 aborts instead, for a backtrace).")

                    """
                _ = message.withCString { write(2, $0, strlen($0)) }
                // Exiting, not aborting, by default: under ThreadSanitizer the crash handler's
                // backtrace of a hung process deadlocked and held CI for 25 minutes.
                if wantsBacktrace { abort() }
                _exit(134)
            }
        }
    }

    /// Stops the watchdog. Idempotent.
    package func disarm() {
        let first = done.withLock { was in
            defer { was = true }
            return !was
        }
        if first { disarmed.signal() }
    }

    deinit { disarm() }
}

/// Runs `body` under a watchdog: if it has not returned within `seconds` (times the
/// `TIMERKIT_WATCHDOG_SCALE` environment variable, for sanitized runs), the watchdog prints
/// `what` (by default the running test's name) and ends the test process, so that a hang
/// fails in seconds rather than at CI's time limit.
public func withWatchdog<R>(_ what: String? = nil, seconds: Double = 30, _ body: () throws -> R) rethrows -> R {
    let watchdog = Watchdog(what, seconds: seconds)
    defer { watchdog.disarm() }
    return try body()
}

/// Runs `body` under a watchdog, as the blocking `withWatchdog` does, with its steps on a thread
/// of its own: on the cooperative pool a step could wait behind blocking tests for longer than
/// the watchdog allows.
public func withWatchdog<R>(_ what: String? = nil, seconds: Double = 30, _ body: () async throws -> R) async rethrows -> R {
    let executor = ThreadTaskExecutor()
    defer { executor.stop() }
    return try await withTaskExecutorPreference(executor) {
        let watchdog = Watchdog(what, seconds: seconds)
        defer { watchdog.disarm() }
        return try await body()
    }
}

// MARK: /proc readers

/// Voluntary context switches of one thread of this process: how often it went to sleep.
package func voluntarySwitches(threadID: Int32) -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/self/task/\(threadID)/status", encoding: .utf8) else { return nil }
    return status.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches") }
        .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) }
}

/// CPU time (user + system) this process has used, in seconds.
package func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The open descriptors of this process and what each one is ("anon_inode:[eventfd]", ...).
package func openDescriptors() -> [Int32: String] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    var result: [Int32: String] = [:]
    for entry in entries {
        guard let fd = Int32(entry),
            let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)")
        else { continue }
        result[fd] = target
    }
    return result
}

/// What changed in the descriptor table between two readings, for a failure message.
package func describeChange(from before: [Int32: String], to after: [Int32: String]) -> String {
    let opened = after.filter { before[$0.key] != $0.value }.map { "+\($0.key) \($0.value)" }
    let closed = before.filter { after[$0.key] != $0.value }.map { "-\($0.key) \($0.value)" }
    return (opened + closed).sorted().joined(separator: ", ")
}

/// Kinds of descriptor the backends open (epoll instances, timerfds, eventfds, pipes).
package func isLoopDescriptor(_ target: String) -> Bool {
    target.hasPrefix("anon_inode:") || target.hasPrefix("pipe:")
}

/// The open descriptors of the kinds the backends open: what a leak check compares. (The
/// rest of the table also holds what the test runtime opens and closes meanwhile, such as
/// the directory listing /proc/self/fd itself.)
package func openLoopDescriptors() -> [Int32: String] {
    openDescriptors().filter { isLoopDescriptor($0.value) }
}

/// In a child process (an exit test), before `exit(0)`: Dispatch and CoreFoundation free a
/// cancelled source or an invalidated run-loop timer a moment after `shutdown()` returns, and
/// LeakSanitizer (in `make asan`) checks at exit. Without this pause it reports those.
package func letAsynchronousReleasesFinish() {
    blockRealTime(.milliseconds(200))
}

/// In a child process (an exit test): makes Dispatch open the descriptors it opens lazily
/// (its epoll and eventfd), so that counts taken afterwards see only what a test opens.
package func warmUpDispatch() {
    let queue = DispatchQueue(label: "warm-up")
    let source = DispatchSource.makeTimerSource(queue: queue)
    let fired = DispatchSemaphore(value: 0)
    source.setEventHandler { fired.signal() }
    source.schedule(deadline: .now() + .milliseconds(1))
    source.activate()
    _ = fired.wait(timeout: .now() + .seconds(5))
    source.cancel()
    DispatchQueue.global().sync {}
}

/// A serial task executor with a thread of its own, for the tasks a test starts on a real
/// backend. A parallel test run keeps the global pool's threads (two on a 2-core machine)
/// busy with synchronous waits, and a task queued behind them could miss the test's
/// deadlines on a loaded machine; on this thread it runs at once. The thread starts with the
/// first job; after `stop()` jobs go to the global executor.
package final class ThreadTaskExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked: `jobs`, `hasThread` and `isStopped` are touched only while holding `mutex`.
    private let mutex = FutexLock()
    private let workArrived = FutexCondition()
    private var jobs: [UnownedJob] = []
    private var hasThread = false
    private var isStopped = false
    private var thread: pthread_t?

    package init() {}

    /// Whether the caller runs on this executor's thread.
    package var isCurrent: Bool { mutex.withLock { thread.map { pthread_equal($0, pthread_self()) != 0 } ?? false } }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        mutex.lock()
        let stopped = isStopped
        let startsThread = !stopped && !hasThread
        if !stopped {
            jobs.append(job)
            hasThread = true
            workArrived.broadcast()
        }
        mutex.unlock()
        if stopped { globalConcurrentExecutor.enqueue(job) }
        if startsThread { Thread.detachNewThread { [self] in run() } }
    }

    /// Lets the thread end once the jobs queued so far have run.
    package func stop() {
        mutex.withLock {
            isStopped = true
            workArrived.broadcast()
        }
    }

    private func run() {
        mutex.lock()
        thread = pthread_self()
        while true {
            if jobs.isEmpty {
                if isStopped { break }
                workArrived.wait(mutex)
                continue
            }
            let batch = jobs
            jobs.removeAll()
            mutex.unlock()
            for job in batch { job.runSynchronously(on: asUnownedTaskExecutor()) }
            mutex.lock()
        }
        mutex.unlock()
    }
}
