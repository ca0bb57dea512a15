import Foundation
import Testing
import TimerKit
import TimerKitEpoll
import TimerKitTestSupport

// Adversarial tests of the timeout path (`.after(d)`, by key and by handle, and
// `reschedule(_, .after(d))`) on EpollBackend: real time, its own loop thread. Every test runs
// its body under a watchdog (a hang fails within seconds), and time bounds are generous: "not
// early" is checked exactly, "on time" only as "within a few seconds".

private func ms(_ n: Int) -> Duration { .milliseconds(n) }

/// What a run of threads saw, for assertions on the test's thread.
private struct EpProblems: Sendable {
    var list: [String] = []
    mutating func add(_ problem: String) { if list.count < 30 { list.append(problem) } }
}

// MARK: - Tests

@Suite("Timeout path, adversarial (EpollBackend)")
struct TimeoutPathAdversarialEpollTests {
    /// 60 timeouts scheduled in an order opposite to their deadlines: each fires once, never
    /// before its deadline (deadline = the reading at `schedule` + delay), on the loop thread,
    /// in deadline order, and not absurdly late.
    @Test(arguments: TimerPath.allCases)
    fileprivate func timeoutsFireOnceInDeadlineOrderAndNeverEarly(path: TimerPath) throws {
        let result = try runUnderWatchdog(15, "timeouts on epoll (\(path))") { () throws -> [String] in
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            var window: [(before: MonotonicInstant, after: MonotonicInstant, delay: Duration)] = []
            for tag in 0..<60 {
                let delay = ms(150 - 2 * tag)  // later scheduled, earlier due
                let before = MonotonicInstant.now()
                _ = try backend.scheduleTimeout(delay, tag: tag, path: path, log: log)
                window.append((before, .now(), delay))
            }
            let schedulingEnded = MonotonicInstant.now()
            let firstDeadline = window.map { $0.before + $0.delay }.min()!
            var out: [String] = []
            if !poll(for: 10, until: { log.endCount == 60 }) { out.append("only \(log.endCount) of 60 ended within 10 s") }
            let fires = log.fires
            if fires.count != 60 { out.append("\(fires.count) fires, expected 60") }
            if Set(fires.map(\.tag)).count != fires.count { out.append("a timer fired twice: \(fires.map(\.tag))") }
            if Set(fires.map(\.thread)).count > 1 { out.append("handlers ran on several threads") }
            for fire in fires {
                let w = window[fire.tag]
                if fire.scheduled < w.before + w.delay || fire.scheduled > w.after + w.delay {
                    out.append("tag \(fire.tag): scheduled \(fire.scheduled) outside [\(w.before + w.delay), \(w.after + w.delay)]")
                }
                if fire.actual < fire.scheduled { out.append("tag \(fire.tag): actual before scheduled") }
                if fire.seen < fire.scheduled { out.append("tag \(fire.tag): ran \(fire.scheduled - fire.seen) early") }
                if fire.actual - fire.scheduled > .seconds(3) { out.append("tag \(fire.tag): \(fire.actual - fire.scheduled) late") }
            }
            // All were scheduled before the first came due (else the VM stalled us: no order check).
            if schedulingEnded < firstDeadline {
                let scheduled = fires.map(\.scheduled)
                // The deadlines, not the tags: a schedule that took longer than the 2 ms between
                // two delays (seen under ThreadSanitizer) gives the later tag the later deadline.
                if scheduled != scheduled.sorted() { out.append("fired out of deadline order: \(fires.map(\.tag))") }
            }
            if log.ends.contains(where: { $0.reason != .completed || $0.fires != 1 }) { out.append("ends: \(log.ends)") }
            if backend.registry.count != 0 { out.append("registry still holds \(backend.registry.count)") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// The earliest cancelled, one moved later, one moved earlier (from 5 s), one unparked from
    /// `.seconds(Int64.max)`: the rest fire at their (new) deadlines, never at old ones.
    @Test(arguments: TimerPath.allCases)
    fileprivate func cancelAndMoveOnARealLoop(path: TimerPath) throws {
        let result = try runUnderWatchdog(15, "cancel and move on epoll (\(path))") { () throws -> [String] in
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let t0 = MonotonicInstant.now()
            let a = try backend.scheduleTimeout(ms(30), tag: 0, path: path, log: log)  // cancelled
            _ = try backend.scheduleTimeout(ms(80), tag: 1, path: path, log: log)  // untouched
            let c = try backend.scheduleTimeout(.seconds(5), tag: 2, path: path, log: log)  // moved earlier: 120 ms
            let d = try backend.scheduleTimeout(.seconds(Int64.max), tag: 3, path: path, log: log)  // unparked: 150 ms
            let e = try backend.scheduleTimeout(ms(40), tag: 4, path: path, log: log)  // moved later: 400 ms
            backend.cancel(held: a)
            try backend.reschedule(held: c, after: ms(120))
            try backend.reschedule(held: d, after: ms(150))
            let movedAt = MonotonicInstant.now()
            try backend.reschedule(held: e, after: ms(400))
            var out: [String] = []
            if !poll(for: 10, until: { log.fireCount == 4 }) { out.append("only \(log.firedTags) fired within 10 s") }
            usleep(50_000)
            let fires = log.fires
            if fires.map(\.tag) != [1, 2, 3, 4] { out.append("fired \(fires.map(\.tag)), expected [1, 2, 3, 4]") }
            let minimum: [Int: Duration] = [1: ms(80), 2: ms(120), 3: ms(150), 4: ms(400)]
            for fire in fires {
                guard let least = minimum[fire.tag] else { continue }
                let base = fire.tag == 1 ? t0 : movedAt + (.zero - ms(1))  // reschedules began before movedAt
                if fire.seen < t0 + least { out.append("tag \(fire.tag) ran \(fire.seen - t0) after start, before \(least)") }
                if fire.seen - base > .seconds(3) { out.append("tag \(fire.tag) ran \(fire.seen - base) late") }
            }
            if backend.isActive(held: a) { out.append("the cancelled timer is active") }
            if log.ends.filter({ $0.tag == 0 }) != [.init(tag: 0, reason: .cancelled, fires: 0)] { out.append("ends: \(log.ends)") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// `.after(.zero)` and sub-millisecond timeouts fire promptly; parked ones (`.seconds(Int64.max)`,
    /// the largest Duration, 1e300 s, exactly at the horizon) do not fire at once (a native timer
    /// reading them as past would) and stay scheduled.
    @Test(arguments: TimerPath.allCases)
    fileprivate func zeroAndParkedTimeouts(path: TimerPath) throws {
        let result = try runUnderWatchdog(15, "zero and parked timeouts on epoll (\(path))") { () throws -> [String] in
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            var out: [String] = []
            let parked: [HeldTimer] = [
                try backend.scheduleTimeout(.seconds(Int64.max), tag: 10, path: path, log: log),
                try backend.scheduleTimeout(
                    Duration(secondsComponent: Int64.max, attosecondsComponent: 999_999_999_999_999_999), tag: 11, path: path, log: log),
                try backend.scheduleTimeout(MonotonicInstant.horizon - .now(), tag: 12, path: path, log: log),
            ]
            let bigSeconds = try backend.schedule(.after(seconds: 1e300)) { _ in
                log.fired(13, scheduled: .distantFuture, actual: .distantFuture)
            }
            for tag in 0..<5 {
                _ = try backend.scheduleTimeout(tag % 2 == 0 ? .zero : .microseconds(100 * tag), tag: tag, path: path, log: log)
            }
            if !poll(for: 5, until: { log.fireCount >= 5 }) { out.append("zero timeouts did not fire within 5 s: \(log.firedTags)") }
            usleep(300_000)
            if Set(log.firedTags) != Set(0..<5) || log.fireCount != 5 { out.append("fired \(log.firedTags)") }
            for fire in log.fires where fire.seen < fire.scheduled { out.append("tag \(fire.tag) early") }
            for (i, held) in parked.enumerated() where !backend.isActive(held: held) { out.append("parked \(i) ended") }
            if !bigSeconds.isActive { out.append("1e300 s ended") }
            // A parked one moved near fires.
            try backend.reschedule(held: parked[0], after: ms(20))
            if !poll(for: 5, until: { log.firedTags.contains(10) }) { out.append("the unparked timer did not fire within 5 s") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// Four threads schedule timeouts of 0–5 ms (keys and handles) and cancel or reschedule them
    /// at random while they fire. Every timer ends exactly once; it fires at most once; the fires
    /// its end reports are the calls it made; a timer nobody touched completes; an error is only
    /// the documented one; statistics add up; nothing hangs.
    @Test func concurrentScheduleCancelRescheduleWhileFiring() throws {
        let threads = 4
        let perThread = 1500
        let result = try runUnderWatchdog(30, "concurrent timeouts on epoll") { () throws -> (problems: [String], info: String) in
            let registry = TimerRegistry()
            let backend = try EpollBackend(registry: registry)
            defer { backend.shutdown() }
            let log = TimerLog()
            let problems = Locked(EpProblems())
            let cancelledByUs = Locked(Set<Int>())
            let touched = Locked(Set<Int>())
            /// Per timer, its reschedules: when the call began and returned, the delay, and whether it succeeded.
            let reschedules = Locked([Int: [(begin: MonotonicInstant, end: MonotonicInstant, delay: Duration, ok: Bool)]]())
            let cancels = Locked([Int: MonotonicInstant]())  // when our cancel returned
            let group = DispatchGroup()
            for t in 0..<threads {
                group.enter()
                Thread {
                    defer { group.leave() }
                    var rng = SplitMix64(state: UInt64(t + 1) * 7919)
                    var recent: [(Int, HeldTimer)] = []
                    for i in 0..<perThread {
                        let tag = t * perThread + i
                        let path: TimerPath = rng.below(2) == 0 ? .key : .handle
                        do {
                            let held = try backend.scheduleTimeout(.microseconds(rng.below(5_000)), tag: tag, path: path, log: log)
                            recent.append((tag, held))
                        } catch {
                            problems.withLock { $0.add("schedule threw \(error)") }
                            continue
                        }
                        if recent.count > 8 { recent.removeFirst() }
                        // Act on a recent timer, which may be firing or have fired.
                        let (victimTag, victim) = recent[rng.below(recent.count)]
                        switch rng.below(6) {
                        case 0, 1:
                            backend.cancel(held: victim)
                            cancels.withLock { $0[victimTag] = .now() }
                            cancelledByUs.withLock { _ = $0.insert(victimTag) }
                            if backend.isActive(held: victim) { problems.withLock { $0.add("active right after cancel") } }
                        case 2, 3:
                            touched.withLock { _ = $0.insert(victimTag) }
                            let delay = Duration.microseconds(rng.below(5_000))
                            let begin = MonotonicInstant.now()
                            var ok = true
                            do { try backend.reschedule(held: victim, after: delay) } catch {
                                ok = false
                                if isTimerEnded(error) {
                                } else {
                                    problems.withLock { $0.add("reschedule threw \(error)") }
                                }
                            }
                            let end = MonotonicInstant.now()
                            reschedules.withLock { $0[victimTag, default: []].append((begin, end, delay, ok)) }
                        case 4:
                            touched.withLock { _ = $0.insert(victimTag) }
                            _ = try? backend.reschedule(held: victim, after: .zero)
                            backend.cancel(held: victim)
                            cancelledByUs.withLock { _ = $0.insert(victimTag) }
                        default:
                            break
                        }
                        if rng.below(64) == 0 { usleep(UInt32(rng.below(2_000))) }
                    }
                }.start()
            }
            if group.wait(timeout: .now() + 20) == .timedOut { return (["the scheduling threads did not finish within 20 s"], "") }
            let total = threads * perThread
            var out: [String] = []
            if !poll(for: 10, until: { log.endCount >= total }) { out.append("only \(log.endCount) of \(total) timers ended within 10 s") }
            usleep(100_000)
            out += problems.current.list
            let ends = log.ends
            let fires = log.fires
            var endsByTag: [Int: [TimerLog.End]] = [:]
            for end in ends { endsByTag[end.tag, default: []].append(end) }
            var firesByTag: [Int: Int] = [:]
            for fire in fires { firesByTag[fire.tag, default: 0] += 1 }
            let cancelled = cancelledByUs.current
            let rescheduled = touched.current
            var cancelledAfterFiring = 0
            var twiceAfterARescheduleDuringTheCall = 0
            // A call that began after our cancel had returned breaks `cancel()`'s promise ("once it
            // returns, the loop begins no new call") unless it was already begun: a call's
            // `actual` is read before the call, so one whose `actual` is well after the cancel
            // returned (1 ms slack) began after it.
            var problemCount = 0
            func problem(_ s: String) {
                problemCount += 1
                if problemCount <= 20 { out.append(s) }
            }
            let cancelTimes = cancels.current
            for fire in fires {
                if let cancelled = cancelTimes[fire.tag], fire.actual > cancelled + .milliseconds(1) {
                    problem("tag \(fire.tag): a call began \(fire.actual - cancelled) after cancel() returned")
                }
            }
            for tag in 0..<total {
                let e = endsByTag[tag] ?? []
                let f = firesByTag[tag] ?? 0
                if e.count != 1 {
                    problem("tag \(tag) ended \(e.count) times: \(e)")
                    continue
                }
                let end = e[0]
                if f > 1 {
                    // Legitimate only if a reschedule succeeded after the first call had begun
                    // (a one-shot is live during its call, as its own handler's reschedule shows).
                    let calls = fires.filter { $0.tag == tag }
                    let moves = reschedules.current[tag] ?? []
                    let lateMove = moves.contains { $0.ok && $0.end >= calls[0].actual }
                    twiceAfterARescheduleDuringTheCall += lateMove ? 1 : 0
                    if !lateMove || f > 1 + moves.filter(\.ok).count {
                        problem(
                            "tag \(tag) fired \(f) times: calls (scheduled, actual) \(calls.map { ($0.scheduled, $0.actual) }); reschedules (begin, end, delay, ok) \(moves)"
                        )
                    }
                }
                if end.fires != f { problem("tag \(tag): end says \(end.fires) fires, \(f) calls seen") }
                switch end.reason {
                case .completed: if end.fires < 1 { problem("tag \(tag) completed with \(end.fires) fires") }
                case .cancelled:
                    if !cancelled.contains(tag) { problem("tag \(tag) cancelled, but nobody cancelled it") }
                    if end.fires > 0 { cancelledAfterFiring += 1 }
                default: problem("tag \(tag) ended \(end.reason)")
                }
                if !cancelled.contains(tag) && !rescheduled.contains(tag) && (end.reason != .completed || f != 1) {
                    problem("untouched tag \(tag): \(end), \(f) calls")
                }
            }
            if problemCount > 20 { out.append("… \(problemCount) problems in all") }
            for fire in fires where fire.seen < fire.scheduled || fire.actual < fire.scheduled { problem("tag \(fire.tag) ran early") }
            let statistics = backend.statistics
            if statistics.fires != fires.count { out.append("statistics.fires \(statistics.fires), calls seen \(fires.count)") }
            let cancelEnds = ends.filter { $0.reason == .cancelled }.count
            if statistics.cancels != cancelEnds { out.append("statistics.cancels \(statistics.cancels), cancelled ends \(cancelEnds)") }
            if statistics.liveTimers != 0 { out.append("statistics.liveTimers \(statistics.liveTimers)") }
            if registry.count != 0 { out.append("registry.count \(registry.count)") }
            let info =
                "\(total) timers, \(fires.count) fires, \(cancelEnds) cancelled (\(cancelledAfterFiring) of them after their one call had begun), \(twiceAfterARescheduleDuringTheCall) fired twice after a reschedule that came during their first call"
            return (out, info)
        }
        if let result {
            #expect(result.problems == [])
        }
    }

    /// `shutdown()` from another thread while three threads schedule, cancel and reschedule
    /// timeouts: it returns; no handler starts after it has returned; each timer that was
    /// scheduled ends exactly once; schedule then throws only `backendShutDown`.
    @Test func shutdownWhileOtherThreadsScheduleAndCancel() throws {
        let result = try runUnderWatchdog(20, "shutdown under load on epoll") { () throws -> [String] in
            let registry = TimerRegistry()
            let backend = try EpollBackend(registry: registry)
            let log = TimerLog()
            let shutDownReturned = Locked(false)
            let lateStarts = Locked(0)
            let problems = Locked(EpProblems())
            let scheduledTags = Locked([Int]())
            let group = DispatchGroup()
            for t in 0..<3 {
                group.enter()
                Thread {
                    defer { group.leave() }
                    var rng = SplitMix64(state: UInt64(t + 11))
                    var i = 0
                    var previous: HeldTimer? = nil
                    while true {
                        let tag = t * 1_000_000 + i
                        i += 1
                        do {
                            let held = try backend.scheduleTimeout(
                                .microseconds(rng.below(5_000)), tag: tag, path: i % 2 == 0 ? .key : .handle, log: log,
                                onFire: { if shutDownReturned.current { lateStarts.withLock { $0 += 1 } } })
                            scheduledTags.withLock { $0.append(tag) }
                            if let previous {
                                if rng.below(2) == 0 {
                                    backend.cancel(held: previous)
                                } else {
                                    do { try backend.reschedule(held: previous, after: .microseconds(rng.below(5_000))) } catch {
                                        switch error as? TimerError {
                                        case .timerEnded?, .keyEnded?, .backendShutDown?: break
                                        default: problems.withLock { $0.add("reschedule threw \(error)") }
                                        }
                                    }
                                }
                            }
                            previous = held
                        } catch {
                            if error as? TimerError != .backendShutDown(backend: "epoll") {
                                problems.withLock { $0.add("schedule threw \(error)") }
                            }
                            return
                        }
                    }
                }.start()
            }
            usleep(150_000)
            backend.shutdown()
            shutDownReturned.withLock { $0 = true }
            let firesAtShutdown = log.fireCount
            var out: [String] = []
            if group.wait(timeout: .now() + 10) == .timedOut { out.append("the scheduling threads did not stop within 10 s") }
            usleep(100_000)
            out += problems.current.list
            if lateStarts.current != 0 { out.append("\(lateStarts.current) handlers started after shutdown() returned") }
            if log.fireCount != firesAtShutdown { out.append("fires went on after shutdown: \(firesAtShutdown) → \(log.fireCount)") }
            let tags = scheduledTags.current
            var endsByTag: [Int: Int] = [:]
            for end in log.ends { endsByTag[end.tag, default: 0] += 1 }
            let notOnce = tags.filter { endsByTag[$0] != 1 }
            if !notOnce.isEmpty {
                out.append(
                    "\(notOnce.count) of \(tags.count) timers did not end exactly once, e.g. \(notOnce.prefix(5).map { ($0, endsByTag[$0] ?? 0) })"
                )
            }
            if registry.count != 0 { out.append("registry.count \(registry.count) after shutdown") }
            if tags.count < 10 { out.append("only \(tags.count) timers were scheduled before the shutdown") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// Shutdown from inside a handler (and from a key's `timerEnded`, on the loop thread)
    /// returns at once; the other timers end once each with `.backendShutDown`, and none fires.
    @Test(arguments: ["handler", "timerEnded"])
    func shutdownFromTheLoopThread(from: String) throws {
        let result = try runUnderWatchdog(10, "shutdown from the loop (\(from))") { () throws -> [String] in
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let returned = Locked<Duration?>(nil)
            let shut: @Sendable () -> Void = {
                let start = MonotonicInstant.now()
                backend.shutdown()
                returned.withLock { $0 = .now() - start }
            }
            for tag in 1...20 { _ = try backend.scheduleTimeout(ms(200 + tag), tag: tag, path: tag % 2 == 0 ? .key : .handle, log: log) }
            if from == "handler" {
                _ = try backend.scheduleTimeout(ms(10), tag: 0, path: .handle, log: log, onFire: shut)
            } else {
                _ = try backend.schedule(.after(ms(10)), calling: LoggingCallback(tag: 0, log: log, onEnded: { _, _, _ in shut() }))
            }
            var out: [String] = []
            if !poll(for: 5, until: { returned.current != nil }) { out.append("shutdown from the loop did not return within 5 s") }
            if let took = returned.current, took > .seconds(1) { out.append("shutdown from the loop took \(took)") }
            if !poll(for: 5, until: { log.endCount == 21 }) { out.append("only \(log.endCount) of 21 ended") }
            usleep(300_000)
            if log.firedTags != [0] { out.append("fired \(log.firedTags)") }
            let others = log.ends.filter { $0.tag != 0 }
            if others.count != 20 || others.contains(where: { $0.reason != .backendShutDown || $0.fires != 0 }) {
                out.append("others' ends: \(others)")
            }
            do {
                _ = try backend.schedule(.after(.zero)) { _ in }
                out.append("schedule after shutdown succeeded")
            } catch {
                if error as? TimerError != .backendShutDown(backend: "epoll") { out.append("schedule after shutdown threw \(error)") }
            }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// Callbacks that call back into the backend on the loop thread: a key's `timerEnded` on
    /// completion schedules, cancels and reschedules; a callback's `deinit` does the same;
    /// `cancelAndWait()` from the handle's own handler returns at once.
    @Test func reentrantCallsFromTheLoopThread() throws {
        let result = try runUnderWatchdog(10, "re-entrant calls on the loop thread") { () throws -> [String] in
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let errors = Locked(EpProblems())
            let victim1 = try backend.schedule(.after(ms(300)), calling: LoggingCallback(tag: 1, log: log))
            let victim2 = try backend.schedule(.after(ms(300)), calling: LoggingCallback(tag: 2, log: log))
            let mover1 = try backend.schedule(.after(.seconds(60)), calling: LoggingCallback(tag: 3, log: log))
            let mover2 = try backend.schedule(.after(.seconds(60)), calling: LoggingCallback(tag: 4, log: log))
            _ = try backend.schedule(
                .after(ms(5)),
                calling: LoggingCallback(
                    tag: 0, log: log,
                    onEnded: { _, _, _ in
                        backend.cancel(victim1)
                        do {
                            try backend.reschedule(mover1, .after(ms(5)))
                            _ = try backend.schedule(.after(ms(5)), calling: LoggingCallback(tag: 5, log: log))
                        } catch { errors.withLock { $0.add("timerEnded: \(error)") } }
                    },
                    onDeinit: {
                        backend.cancel(victim2)
                        do {
                            try backend.reschedule(mover2, .after(ms(5)))
                            _ = try backend.schedule(.after(ms(5)), calling: LoggingCallback(tag: 6, log: log))
                        } catch { errors.withLock { $0.add("deinit: \(error)") } }
                    }))
            let waited = Locked<Duration?>(nil)
            let selfWaiter = try backend.schedule(.after(ms(5))) { tick in
                let start = MonotonicInstant.now()
                tick.timer.cancelAndWait()
                waited.withLock { $0 = .now() - start }
            }
            var out: [String] = []
            if !poll(for: 5, until: { Set(log.firedTags).isSuperset(of: [0, 3, 4, 5, 6]) }) {
                out.append("fired only \(log.firedTags) within 5 s")
            }
            if !poll(for: 5, until: { waited.current != nil }) { out.append("cancelAndWait from its own handler did not return") }
            if let took = waited.current, took > .seconds(1) { out.append("cancelAndWait from its own handler took \(took)") }
            usleep(400_000)
            out += errors.current.list
            let fired = log.firedTags
            if fired.contains(1) || fired.contains(2) { out.append("a victim fired after its cancel: \(fired)") }
            if fired.count != Set(fired).count { out.append("a timer fired twice: \(fired)") }
            if selfWaiter.isActive { out.append("the self-waiter is active") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// The idle-timeout pattern: 100 keyed timeouts of 300 ms pushed back every ~10 ms from
    /// another thread for 0.6 s. While they are pushed back none fires (unless this thread
    /// stalled longer than the timeout); after the last push, each fires once, not before its
    /// last deadline.
    @Test func idleTimeoutsPushedBackDoNotFireAtStaleDeadlines() throws {
        let result = try runUnderWatchdog(15, "idle timeouts on epoll") { () throws -> [String] in
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            var keys: [TimerKey] = []
            for tag in 0..<100 { keys.append(try backend.schedule(.after(ms(300)), calling: LoggingCallback(tag: tag, log: log))) }
            var lastPush = [MonotonicInstant](repeating: .now(), count: 100)
            var maxGap = Duration.zero
            var previousRound = MonotonicInstant.now()
            let stop = MonotonicInstant.now() + ms(600)
            var out: [String] = []
            while MonotonicInstant.now() < stop {
                let round = MonotonicInstant.now()
                maxGap = max(maxGap, round - previousRound)
                previousRound = round
                for (tag, key) in keys.enumerated() {
                    let before = MonotonicInstant.now()
                    do { try backend.reschedule(key, .after(ms(300))) } catch {
                        out.append("tag \(tag): \(error)")
                        break
                    }
                    lastPush[tag] = before
                }
                usleep(10_000)
            }
            let firedWhilePushed = log.fireCount
            if maxGap < ms(250) && firedWhilePushed != 0 {
                out.append("\(firedWhilePushed) fired while being pushed back (largest gap between pushes \(maxGap))")
            }
            if !poll(for: 10, until: { log.endCount == 100 }) { out.append("only \(log.endCount) of 100 ended") }
            for fire in log.fires where fire.seen < lastPush[fire.tag] + ms(300) && maxGap < ms(250) {
                out.append("tag \(fire.tag) ran \(lastPush[fire.tag] + ms(300) - fire.seen) before its last deadline")
            }
            if log.fireCount != 100 || Set(log.firedTags).count != 100 { out.append("\(log.fireCount) fires") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// The epoll backend's cap: refuses with scope "epoll backend", counts, and a fired timeout
    /// makes room again (its end on the loop thread frees the slot).
    @Test func theEpollCapRefusesAndRecovers() throws {
        let result = try runUnderWatchdog(10, "cap on epoll") { () throws -> [String] in
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            try backend.limitLiveTimers(to: 2)
            let log = TimerLog()
            var out: [String] = []
            _ = try backend.scheduleTimeout(ms(20), tag: 0, path: .key, log: log)
            _ = try backend.scheduleTimeout(ms(20), tag: 1, path: .handle, log: log)
            for path in TimerPath.allCases {
                do {
                    _ = try backend.scheduleTimeout(.zero, tag: 9, path: path, log: log)
                    out.append("\(path): the cap did not refuse")
                } catch {
                    if error as? TimerError != .liveTimerLimit(scope: "epoll backend", limit: 2) { out.append("\(path): \(error)") }
                }
            }
            if backend.refusedByLiveTimerLimit != 2 { out.append("refused \(backend.refusedByLiveTimerLimit)") }
            if !poll(for: 5, until: { log.endCount == 2 }) { out.append("the two did not end") }
            do {
                _ = try backend.scheduleTimeout(.zero, tag: 2, path: .key, log: log)
                _ = try backend.scheduleTimeout(.zero, tag: 3, path: .handle, log: log)
            } catch { out.append("after the fires, schedule threw \(error)") }
            if !poll(for: 5, until: { log.fireCount == 4 }) { out.append("fired \(log.firedTags)") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// A key's `timerEnded` (and a handle's `onEnd`) for a timer cancelled, or shut down, from
    /// another thread while its call runs: it comes only after that call has returned ("no call
    /// of it runs any more"). `cancelAndWait()` from another thread returns only after the call.
    @Test(arguments: TimerPath.allCases, ["cancel", "cancelAndWait", "shutdown"])
    fileprivate func anEndIsReportedOnlyAfterTheRunningCallReturns(path: TimerPath, how: String) throws {
        let result = try runUnderWatchdog(10, "end after the running call (\(path), \(how))") { () throws -> [String] in
            let backend = try EpollBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let running = Locked(0)  // 1 while the call runs, 2 once it has returned
            let endSawRunning = Locked<Int?>(nil)
            let ended = Locked<(TimerEndReason, Int)?>(nil)
            let held: HeldTimer
            let body: @Sendable () -> Void = {
                running.withLock { $0 = 1 }
                usleep(200_000)
                running.withLock { $0 = 2 }
            }
            switch path {
            case .key:
                held = .key(
                    try backend.schedule(
                        .after(ms(5)),
                        calling: LoggingCallback(
                            tag: 0, log: TimerLog(), onFire: { _ in body() },
                            onEnded: { _, reason, fires in
                                endSawRunning.withLock { $0 = running.current }
                                ended.withLock { $0 = (reason, fires) }
                            })))
            case .handle:
                let handle = try backend.schedule(.after(ms(5))) { _ in body() }
                handle.onEnd { [handle] reason in
                    endSawRunning.withLock { $0 = running.current }
                    ended.withLock { $0 = (reason, handle.fireCount) }
                }
                held = .handle(handle)
            }
            var out: [String] = []
            if !poll(for: 5, until: { running.current == 1 }) { return ["the call did not start within 5 s"] }
            switch how {
            case "cancel": backend.cancel(held: held)
            case "cancelAndWait":
                guard case let .handle(handle) = held else {
                    backend.cancel(held: held)
                    break
                }
                handle.cancelAndWait()
                if running.current != 2 { out.append("cancelAndWait returned while the call still ran") }
            default:
                backend.shutdown()
                if running.current != 2 { out.append("shutdown from another thread returned while a handler still ran") }
            }
            if !poll(for: 5, until: { ended.current != nil }) { out.append("no end reported within 5 s") }
            if let saw = endSawRunning.current, saw != 2 { out.append("the end was reported while the call ran (state \(saw))") }
            if let (reason, fires) = ended.current {
                let expected: TimerEndReason = how == "shutdown" ? .backendShutDown : .cancelled
                if fires != 1 { out.append("the end says \(fires) fires") }
                // A timer is live until its last call returns: it ends for what ended it then.
                if reason != expected { out.append("reason \(reason)") }
            }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// A backend cap (20) and a registry cap (30, shared with a second backend) hammered by
    /// four threads scheduling 0–1 ms timeouts while they fire: the live count never exceeds a
    /// cap, every refusal is the documented error and is counted, the timers that got in end
    /// once each, and afterwards the caps admit exactly up to their limit again.
    @Test func capsHoldUnderConcurrentTimeouts() throws {
        let result = try runUnderWatchdog(30, "caps under load on epoll") { () throws -> [String] in
            let registry = TimerRegistry()
            try registry.limitLiveTimers(to: 30)
            let backend = try EpollBackend(registry: registry)
            let other = try EpollBackend(registry: registry)
            defer {
                backend.shutdown()
                other.shutdown()
            }
            try backend.limitLiveTimers(to: 20)
            let log = TimerLog()
            let problems = Locked(EpProblems())
            let refusals = Locked((backend: 0, registry: 0))
            let admitted = Locked(0)
            let maxSeen = Locked((backend: 0, registry: 0))
            let stop = Locked(false)
            let group = DispatchGroup()
            group.enter()
            Thread {
                defer { group.leave() }
                while !stop.current {
                    let live = backend.statistics.liveTimers
                    let count = registry.count
                    maxSeen.withLock { $0 = (max($0.backend, live), max($0.registry, count)) }
                }
            }.start()
            let workers = DispatchGroup()
            for t in 0..<4 {
                workers.enter()
                Thread {
                    defer { workers.leave() }
                    var rng = SplitMix64(state: UInt64(t) + 77)
                    for i in 0..<3_000 {
                        let on: any TimerBackend = t == 3 ? other : backend
                        do {
                            _ = try on.scheduleTimeout(
                                .microseconds(rng.below(1_000)), tag: t * 10_000 + i, path: i % 2 == 0 ? .key : .handle, log: log)
                            admitted.withLock { $0 += 1 }
                        } catch {
                            switch error as? TimerError {
                            case .liveTimerLimit(scope: "epoll backend", limit: 20)?: refusals.withLock { $0.backend += 1 }
                            case .liveTimerLimit(scope: "registry", limit: 30)?: refusals.withLock { $0.registry += 1 }
                            default: problems.withLock { $0.add("schedule threw \(error)") }
                            }
                        }
                    }
                }.start()
            }
            var out: [String] = []
            if workers.wait(timeout: .now() + 20) == .timedOut { out.append("the workers did not finish within 20 s") }
            if !poll(for: 10, until: { log.endCount == admitted.current }) { out.append("\(log.endCount) of \(admitted.current) ended") }
            stop.withLock { $0 = true }
            _ = group.wait(timeout: .now() + 5)
            out += problems.current.list
            let seen = maxSeen.current
            if seen.backend > 20 { out.append("the backend held \(seen.backend) live timers, over its cap of 20") }
            if seen.registry > 30 { out.append("the registry held \(seen.registry) live timers, over its cap of 30") }
            let counted = refusals.current
            if backend.refusedByLiveTimerLimit != counted.backend {
                out.append("backend counted \(backend.refusedByLiveTimerLimit) refusals, threw \(counted.backend)")
            }
            if registry.refusedByLiveTimerLimit != counted.registry {
                out.append("registry counted \(registry.refusedByLiveTimerLimit) refusals, threw \(counted.registry)")
            }
            if admitted.current + counted.backend + counted.registry != 12_000 { out.append("attempts do not add up") }
            let ends = log.ends
            if Set(ends.map(\.tag)).count != ends.count { out.append("a timer ended twice") }
            if ends.contains(where: { $0.reason != .completed || $0.fires != 1 }) { out.append("a timer did not complete once") }
            // Afterwards: exactly 20 fit on the backend.
            var parked: [HeldTimer] = []
            for i in 0..<20 {
                do {
                    parked.append(try backend.scheduleTimeout(.seconds(60), tag: 100_000 + i, path: i % 2 == 0 ? .key : .handle, log: log))
                } catch {
                    out.append("after the load, timer \(i) refused: \(error)")
                    break
                }
            }
            do {
                _ = try backend.scheduleTimeout(.seconds(60), tag: 100_100, path: .key, log: log)
                out.append("the 21st timer was admitted")
            } catch {
                if error as? TimerError != .liveTimerLimit(scope: "epoll backend", limit: 20) { out.append("the 21st: \(error)") }
            }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// The last reference to the backend is a key callback's, released on the loop thread after
    /// its timer fired and ended: the backend's `deinit` (its shutdown) then runs on its own loop
    /// thread. It must not hang or crash, and the other timers end once with `.backendShutDown`.
    @Test func theLastReferenceToTheBackendReleasedOnItsLoopThread() throws {
        let result = try runUnderWatchdog(10, "backend released on its own loop") { () throws -> [String] in
            let log = TimerLog()
            let registry = TimerRegistry()
            final class Holder: TimerCallback, Sendable {
                let backend: EpollBackend?
                let log: TimerLog
                init(_ backend: EpollBackend, _ log: TimerLog) {
                    self.backend = backend
                    self.log = log
                }
                func timerFired(_ fire: TimerFire) { log.fired(0, scheduled: fire.scheduled, actual: fire.actual) }
                func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) { log.ended(0, reason, fires: fires) }
            }
            do {
                let backend = try EpollBackend(registry: registry)
                for tag in 1...10 { _ = try backend.schedule(.after(.seconds(60)), calling: LoggingCallback(tag: tag, log: log)) }
                _ = try backend.schedule(.after(ms(20)), calling: Holder(backend, log))
            }
            var out: [String] = []
            if !poll(for: 5, until: { log.endCount == 11 }) { out.append("only \(log.endCount) of 11 ended within 5 s") }
            let ends = log.ends
            if ends.filter({ $0.tag == 0 }) != [.init(tag: 0, reason: .completed, fires: 1)] {
                out.append("holder: \(ends.filter { $0.tag == 0 })")
            }
            let others = ends.filter { $0.tag != 0 }
            if others.count != 10 || others.contains(where: { $0.reason != .backendShutDown || $0.fires != 0 }) {
                out.append("others: \(others)")
            }
            if !poll(for: 2, until: { registry.count == 0 }) { out.append("registry.count \(registry.count)") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// `shutdown()` from four threads at once while a handler also calls it and others schedule:
    /// every call returns, each timer ends exactly once.
    @Test func shutdownFromManyThreadsAtOnce() throws {
        let result = try runUnderWatchdog(15, "concurrent shutdowns") { () throws -> [String] in
            let registry = TimerRegistry()
            let backend = try EpollBackend(registry: registry)
            let log = TimerLog()
            var scheduled = 0
            for tag in 0..<400 {
                var hook: (@Sendable () -> Void)? = nil
                if tag == 100 { hook = { backend.shutdown() } }
                let path: TimerPath = tag % 2 == 0 ? .key : .handle
                do {
                    _ = try backend.scheduleTimeout(.microseconds(tag * 50), tag: tag, path: path, log: log, onFire: hook)
                } catch {
                    // On a loaded machine timer 100 may come due, and shut the backend down,
                    // before this loop is done: the timers scheduled so far are the test's.
                    guard case TimerError.backendShutDown? = error as? TimerError else { throw error }
                    break
                }
                scheduled += 1
            }
            let start = DispatchSemaphore(value: 0)
            let group = DispatchGroup()
            for _ in 0..<4 {
                group.enter()
                Thread {
                    start.wait()
                    backend.shutdown()
                    group.leave()
                }.start()
            }
            usleep(4_000)
            for _ in 0..<4 { start.signal() }
            var out: [String] = []
            if group.wait(timeout: .now() + 10) == .timedOut { out.append("a shutdown() did not return within 10 s") }
            if !poll(for: 5, until: { log.endCount == scheduled }) { out.append("\(log.endCount) of \(scheduled) ended") }
            let ends = log.ends
            if Set(ends.map(\.tag)).count != ends.count { out.append("a timer ended twice") }
            for end in ends where end.reason != .completed && end.reason != .backendShutDown { out.append("tag \(end.tag): \(end.reason)") }
            if registry.count != 0 { out.append("registry.count \(registry.count)") }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// 10 000 timeouts due within the same millisecond (more than one turn's 4096 calls), on
    /// each wait mode: all fire once, in deadline order across the turns, none early.
    @Test(arguments: ["timerfd", "epollPwait2"])
    func moreDueAtOnceThanOneTurnTakes(mode: String) throws {
        if mode == "epollPwait2" && !EpollBackend.supportsEpollPwait2 { return }
        let result = try runUnderWatchdog(30, "10 000 due at once (\(mode))") { () throws -> [String] in
            let backend = try EpollBackend(options: .init(waitMode: mode == "timerfd" ? .timerfd : .epollPwait2), registry: TimerRegistry())
            defer { backend.shutdown() }
            let log = TimerLog()
            let count = 10_000
            var rng = SplitMix64(state: 3)
            let base = MonotonicInstant.now()
            for tag in 0..<count {
                // Deadlines spread over 1 ms, 300 ms out, scheduled in random order of deadline.
                let target = base + ms(300) + .nanoseconds(rng.below(1_000_000))
                let delay = target - .now()
                _ = try backend.scheduleTimeout(delay < .zero ? .zero : delay, tag: tag, path: tag % 3 == 0 ? .handle : .key, log: log)
            }
            let scheduledBy = MonotonicInstant.now()
            var out: [String] = []
            if !poll(for: 20, until: { log.endCount == count }) { out.append("only \(log.endCount) of \(count) ended within 20 s") }
            let fires = log.fires
            if fires.count != count || Set(fires.map(\.tag)).count != count { out.append("\(fires.count) fires") }
            for fire in fires where fire.seen < fire.scheduled {
                out.append("tag \(fire.tag) early")
                break
            }
            if scheduledBy < base + ms(300) {
                let scheduled = fires.map(\.scheduled)
                if scheduled != scheduled.sorted() {
                    let i = scheduled.indices.dropLast().first { scheduled[$0] > scheduled[$0 + 1] } ?? -1
                    out.append("out of deadline order at call \(i) of \(count)")
                }
            }
            return out
        }
        if let result { #expect(result == []) }
    }

    /// Threads acting on one shared pool of timeouts (each timer scheduled by one thread,
    /// cancelled and rescheduled by the others), on each wait mode: each ends exactly once,
    /// the end's fire count is the calls seen, a cancelled timer never begins a call long after
    /// the cancel returned, and the live count returns to zero.
    @Test(arguments: ["timerfd", "epollPwait2"])
    func threadsSharingTimeouts(mode: String) throws {
        if mode == "epollPwait2" && !EpollBackend.supportsEpollPwait2 { return }
        let result = try runUnderWatchdog(30, "shared pool (\(mode))") { () throws -> [String] in
            let registry = TimerRegistry()
            let backend = try EpollBackend(options: .init(waitMode: mode == "timerfd" ? .timerfd : .epollPwait2), registry: registry)
            defer { backend.shutdown() }
            let log = TimerLog()
            let pool = Locked([(Int, HeldTimer)]())
            let cancelReturned = Locked([Int: MonotonicInstant]())
            let problems = Locked(EpProblems())
            let scheduled = Locked(0)
            let group = DispatchGroup()
            for t in 0..<4 {
                group.enter()
                Thread {
                    defer { group.leave() }
                    var rng = SplitMix64(state: UInt64(t) * 31 + 5)
                    for i in 0..<1_500 {
                        if t < 2 || rng.below(3) == 0 {
                            let tag = t * 100_000 + i
                            do {
                                let held = try backend.scheduleTimeout(
                                    .microseconds(rng.below(4_000)), tag: tag, path: rng.below(2) == 0 ? .key : .handle, log: log)
                                scheduled.withLock { $0 += 1 }
                                pool.withLock {
                                    $0.append((tag, held))
                                    if $0.count > 64 { $0.removeFirst(16) }
                                }
                            } catch { problems.withLock { $0.add("schedule threw \(error)") } }
                        }
                        guard let (tag, held) = pool.withLock({ $0.isEmpty ? nil : $0[rng.below($0.count)] }) else { continue }
                        switch rng.below(3) {
                        case 0:
                            backend.cancel(held: held)
                            let now = MonotonicInstant.now()
                            cancelReturned.withLock { if $0[tag] == nil { $0[tag] = now } }
                        default:
                            do { try backend.reschedule(held: held, after: .microseconds(rng.below(4_000))) } catch {
                                if isTimerEnded(error) {
                                } else {
                                    problems.withLock { $0.add("reschedule threw \(error)") }
                                }
                            }
                        }
                    }
                }.start()
            }
            var out: [String] = []
            if group.wait(timeout: .now() + 20) == .timedOut { return ["the threads did not finish within 20 s"] }
            if !poll(for: 10, until: { log.endCount >= scheduled.current }) { out.append("\(log.endCount) of \(scheduled.current) ended") }
            usleep(50_000)
            out += problems.current.list
            var ends: [Int: [TimerLog.End]] = [:]
            for end in log.ends { ends[end.tag, default: []].append(end) }
            var calls: [Int: Int] = [:]
            for fire in log.fires { calls[fire.tag, default: 0] += 1 }
            var bad = 0
            for (tag, list) in ends where list.count != 1 || list[0].fires != (calls[tag] ?? 0) {
                bad += 1
                if bad <= 10 { out.append("tag \(tag): ends \(list), calls \(calls[tag] ?? 0)") }
            }
            if ends.count != scheduled.current { out.append("\(ends.count) timers ended, \(scheduled.current) scheduled") }
            let cancels = cancelReturned.current
            for fire in log.fires {
                if let at = cancels[fire.tag], fire.actual > at + .milliseconds(1) {
                    out.append("tag \(fire.tag): a call began \(fire.actual - at) after cancel() had returned")
                    break
                }
            }
            if backend.statistics.liveTimers != 0 || registry.count != 0 {
                out.append("live \(backend.statistics.liveTimers), registry \(registry.count)")
            }
            return out
        }
        if let result { #expect(result == []) }
    }
}
