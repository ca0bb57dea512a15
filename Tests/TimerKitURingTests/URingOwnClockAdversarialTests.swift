import Foundation
import Synchronization
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitTestSupport
import TimerKitURing

/// Tries to break the promises every backend makes, on io_uring's own-clock timeouts: timers on
/// the continuous and wall clocks (`CLOCK_BOOTTIME` and `CLOCK_REALTIME` timeouts, one per
/// clock, moved in place), alone and mixed with monotonic ones, scheduled, cancelled, moved,
/// suspended and shut down from other threads while the loop sleeps or fires. Each test
/// asserts orderings and generous bounds only: the machine is a noisy 2-core VM.
@Suite("io_uring own-clock adversarial", .serialized)
struct URingOwnClockAdversarialTests {
    // MARK: Never early, in order

    /// Promise: a wall timer never fires before its date, a continuous one never before its
    /// delay, and timers fire in deadline order. A 1 µs monotonic timer keeps the loop turning
    /// without sleeping (its due-deadline path never enters the ring), so the own-clock timers
    /// are judged at every turn, not only when their timeouts expire.
    @Test func ownClockTimersNeverFireEarlyWhileAMicrosecondTimerKeepsTheLoopBusy() async throws {
        if try BackendKind.uring.checkedUnavailable("the never-early check under load") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let spinner = try backend.schedule(.every(.microseconds(1))) { _ in }
            let early = Locked<[String]>([])
            let wallOrder = Locked<[Int]>([])
            let fired = Counter()
            let base = Date()
            let count = 120
            for index in 0..<count {
                // 1 ms apart, plus an odd number of µs so that dates fall between loop turns.
                let offset = 0.02 + Double(index) * 0.001 + Double(index % 7) * 0.000_013
                let date = base.addingTimeInterval(offset)
                let due = nanoseconds(of: date)
                try backend.schedule(.at(date: date)) { _ in
                    let now = wallNanoseconds()
                    if now < due { early.withLock { $0.append("wall #\(index) \(due - now) ns early") } }
                    wallOrder.withLock { $0.append(index) }
                    fired.increment()
                }
                let delay = Duration.nanoseconds(Int64(offset * 1e9))
                let start = bootNanoseconds()  // read before scheduling: the timer's start is later
                try backend.schedule(.after(delay, on: .continuous)) { _ in
                    let now = bootNanoseconds()
                    let due = start + UInt64(delay.saturatingNanoseconds)
                    if now < due { early.withLock { $0.append("continuous #\(index) \(due - now) ns early") } }
                    fired.increment()
                }
            }
            #expect(waitFor { fired.current == 2 * count }, "\(fired.current) of \(2 * count) fired")
            spinner.cancel()
            #expect(early.current.isEmpty, "\(early.current.prefix(10))")
            #expect(wallOrder.current == Array(0..<count), "wall timers out of date order: \(wallOrder.current.prefix(20))")
        }
    }

    // MARK: The earliest moves

    /// A wall timer that becomes the earliest deadline of all three clocks (the loop sleeps with
    /// hour-long timeouts on each), is cancelled from another thread, and one moved from the
    /// wall clock to the monotonic one and one from the continuous to the wall clock: the
    /// cancelled one never fires, the moved ones fire once each, on their new clocks and not
    /// before their new deadlines, and then the loop sleeps again.
    @Test func aWallTimerThatBecomesTheEarliestIsCancelledOrMovedToAnotherClock() async throws {
        if try BackendKind.uring.checkedUnavailable("the cancel and move of an earliest wall timer") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            for clock in DeadlineClock.allCases { try backend.schedule(.after(.seconds(3600), on: clock)) { _ in } }
            blockRealTime(.milliseconds(30))  // the loop sleeps with three hour-long timeouts
            let cancelledFired = Counter()
            let fires = Locked<[String]>([])
            let monotonicDue = Locked<UInt64>(.max)
            let wallDue = Locked<UInt64>(.max)
            onNewThread {
                do {
                    // A call that began before `cancel()` returned is allowed (a stalled thread
                    // may reach it after the date); one after it is not.
                    let cancelReturned = Locked(false)
                    let cancelled = try backend.schedule(.after(.milliseconds(150), on: .wall)) { _ in
                        if cancelReturned.current { cancelledFired.increment() }
                    }
                    cancelled.cancel()
                    cancelReturned.withLock { $0 = true }
                    let toMonotonic = try backend.schedule(.after(.milliseconds(300), on: .wall)) { tick in
                        let onTime = MonotonicInstant.now().nanoseconds >= monotonicDue.current
                        fires.withLock { $0.append("toMonotonic \(tick.clock) \(onTime ? "on time" : "early")") }
                    }
                    monotonicDue.withLock { $0 = (MonotonicInstant.now() + .milliseconds(60)).nanoseconds }
                    try toMonotonic.reschedule(.after(.milliseconds(60)))
                    let toWall = try backend.schedule(.after(.milliseconds(250), on: .continuous)) { tick in
                        let onTime = wallNanoseconds() >= wallDue.current
                        fires.withLock { $0.append("toWall \(tick.clock) \(onTime ? "on time" : "early")") }
                    }
                    let date = Date().addingTimeInterval(0.05)
                    wallDue.withLock { $0 = nanoseconds(of: date) }
                    try toWall.reschedule(.at(date: date))
                } catch {
                    Issue.record("scheduling from another thread failed: \(error)")
                }
            }
            #expect(waitFor { fires.current.count >= 2 }, "\(fires.current)")
            blockRealTime(.milliseconds(200))  // past the cancelled one's date
            #expect(cancelledFired.current == 0, "a wall timer cancelled before its date fired")
            #expect(Set(fires.current) == ["toMonotonic monotonic on time", "toWall wall on time"], "\(fires.current)")
            #expect(fires.current.count == 2, "\(fires.current)")
            try expectLoopSleeps(backend)
        }
    }

    /// Promise: reschedule works on timers of every clock, from any thread. The loop sleeps
    /// with the timer's hour-long timeout on its own clock; another thread moves it near (by
    /// handle, and by key through `backend.reschedule`): the loop wakes for it, and it fires
    /// once, not before its new deadline. One moved from near to far does not fire at its old
    /// deadline; one moved to a date in the past fires at once, once.
    @Test(arguments: [DeadlineClock.continuous, .wall])
    func reschedulingFromAnotherThreadWhileTheLoopSleeps(_ clock: DeadlineClock) async throws {
        if try BackendKind.uring.checkedUnavailable("the cross-thread reschedule") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let read: @Sendable () -> UInt64 = clock == .wall ? wallNanoseconds : bootNanoseconds
            @Sendable func near(_ milliseconds: Int) -> (TimerSchedule, due: UInt64) {
                if clock == .wall {
                    let date = Date().addingTimeInterval(Double(milliseconds) / 1000)
                    return (.at(date: date), nanoseconds(of: date))
                }
                return (.after(.milliseconds(milliseconds), on: .continuous), read() + UInt64(milliseconds) * 1_000_000)
            }
            let due = Locked<[String: UInt64]>([:])
            let fires = Locked<[String]>([])
            @Sendable func record(_ name: String, _ clockFired: DeadlineClock) {
                let onTime = read() >= (due.current[name] ?? .max)
                fires.withLock { $0.append("\(name) \(clockFired == clock ? "" : "on \(clockFired) ")\(onTime ? "on time" : "early")") }
            }
            let byHandle = try backend.schedule(.after(.seconds(3600), on: clock)) { tick in record("handle", tick.clock) }
            let callback = RecordingCallback { fire in record("key", fire.clock) }
            let byKey = try backend.schedule(.after(.seconds(3600), on: clock), calling: callback)
            // A call that began before its move returned is allowed (the other thread may be
            // stalled past the old deadline on a loaded machine); one after it is not.
            let farMoved = Locked(false)
            let farFiredBeforeMove = Counter()
            let farAway = try backend.schedule(near(150).0) { tick in
                if farMoved.current { record("farAway", tick.clock) } else { farFiredBeforeMove.increment() }
            }
            blockRealTime(.milliseconds(20))
            let counts = backend.loopCounts
            let waits = counts.waits
            onNewThread {
                do {
                    // Far: its old deadline passes without a fire.
                    due.withLock { $0["farAway"] = read() + 3_600_000_000_000 }
                    try farAway.reschedule(.after(.seconds(3600), on: clock))
                    farMoved.withLock { $0 = true }
                    blockRealTime(.milliseconds(20))  // the loop sleeps again
                    let (first, firstDue) = near(30)
                    due.withLock { $0["handle"] = firstDue }
                    try byHandle.reschedule(first)
                    let (second, secondDue) = near(20)
                    due.withLock { $0["key"] = secondDue }
                    try backend.reschedule(byKey, second)
                } catch {
                    Issue.record("rescheduling from another thread failed: \(error)")
                }
            }
            #expect(waitFor { fires.current.count >= 2 }, "\(fires.current)")
            #expect(counts.waits - waits <= 12, "\(counts.waits - waits) wake-ups for two moved timers")
            blockRealTime(.milliseconds(200))  // past farAway's old deadline
            #expect(fires.current.sorted() == ["handle on time", "key on time"], "\(fires.current)")
            #expect(byHandle.fireCount == 1 && !backend.isActive(byKey))
            #expect(farAway.isActive || farFiredBeforeMove.current == 1)
            #expect(counts.rearms == 0, "the monotonic timeout was armed \(counts.rearms) times for timers on \(clock)")

            // To a date (or delay) already past, from another thread: at once, once.
            let pastFired = Counter()
            let past = try backend.schedule(.after(.seconds(3600), on: clock)) { _ in pastFired.increment() }
            blockRealTime(.milliseconds(10))
            onNewThread {
                let schedule: TimerSchedule =
                    clock == .wall ? .at(date: Date(timeIntervalSinceNow: -5)) : .after(.zero, on: .continuous)
                do { try past.reschedule(schedule) } catch { Issue.record("\(error)") }
            }
            #expect(waitFor(.seconds(5)) { pastFired.current == 1 })
            blockRealTime(.milliseconds(50))
            #expect(pastFired.current == 1)
        }
    }

    // MARK: Many threads

    /// Promise: schedule and cancel are safe from any thread, and a cancelled timer never
    /// begins a call after `cancel()` returned. Eight threads schedule 150 timers each, on all
    /// three clocks, each one earlier than the thread's last (so that each can become its
    /// clock's earliest and wake the loop), and cancel every third right away. Every timer
    /// not cancelled fires exactly once, never before its deadline; no cancelled one begins a
    /// call after its `cancel()` returned.
    @Test func manyThreadsScheduleAndCancelOnAllClocksAtOnce() async throws {
        if try BackendKind.uring.checkedUnavailable("the many-thread schedule") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let (threads, perThread) = (8, 150)
            let fireCounts = Locked<[Int: Int]>([:])
            let began = Locked<[Int: UInt64]>([:])  // monotonic ns at which each call began
            let cancelReturned = Locked<[Int: UInt64]>([:])
            let early = Locked<[String]>([])
            await onThreadsAsync(threads) { thread in
                let clock = DeadlineClock.allCases[thread % 3]
                for step in 0..<perThread {
                    let id = thread * perThread + step
                    // From 200 ms down to 20 ms: each is its clock's earliest when scheduled.
                    let delay = Duration.microseconds(20_000 + 1_200 * (perThread - 1 - step) + 7 * thread)
                    let schedule: TimerSchedule
                    let due: UInt64
                    switch clock {
                    case .wall:
                        let date = Date().addingTimeInterval(Double(delay.saturatingNanoseconds) / 1e9)
                        (schedule, due) = (.at(date: date), nanoseconds(of: date))
                    case .continuous:
                        (schedule, due) = (.after(delay, on: .continuous), bootNanoseconds() + UInt64(delay.saturatingNanoseconds))
                    case .monotonic:
                        (schedule, due) = (.after(delay), MonotonicInstant.now().nanoseconds + UInt64(delay.saturatingNanoseconds))
                    }
                    do {
                        let handle = try backend.schedule(schedule) { tick in
                            began.withLock { $0[id] = tick.actual.nanoseconds }
                            let now =
                                clock == .wall
                                ? wallNanoseconds() : clock == .continuous ? bootNanoseconds() : MonotonicInstant.now().nanoseconds
                            if now < due { early.withLock { $0.append("#\(id) on \(clock) \(due - now) ns early") } }
                            fireCounts.withLock { $0[id, default: 0] += 1 }
                        }
                        if step % 3 == 0 {
                            handle.cancel()
                            let returned = MonotonicInstant.now().nanoseconds
                            cancelReturned.withLock { $0[id] = returned }
                            handle.cancel()  // twice: harmless
                        }
                    } catch {
                        Issue.record("schedule from thread \(thread) failed: \(error)")
                    }
                }
            }
            let expected = threads * perThread - threads * ((perThread + 2) / 3)
            let notCancelledFired = { fireCounts.current.keys.count { cancelReturned.current[$0] == nil } }
            #expect(waitFor { notCancelledFired() == expected }, "\(notCancelledFired()) of \(expected) fired")
            blockRealTime(.milliseconds(100))
            let counts = fireCounts.current
            #expect(counts.values.allSatisfy { $0 == 1 }, "fired more than once: \(counts.filter { $0.value > 1 }.prefix(10))")
            #expect(early.current.isEmpty, "\(early.current.prefix(10))")
            let lateCalls = cancelReturned.current.compactMap { id, returned in
                began.current[id].flatMap { $0 > returned ? "#\(id) began \($0 - returned) ns after cancel() returned" : nil }
            }
            #expect(lateCalls.isEmpty, "\(lateCalls.prefix(10))")
            #expect(backend.registry.count == 0, "\(backend.registry.count) timers left in the registry")
        }
    }

    // MARK: The last own-clock timer goes

    /// The last wall and continuous timers are cancelled (and, in a second round, suspended)
    /// from another thread after the loop armed their timeouts, while monotonic ones remain:
    /// the loop wakes at most once for each and then sleeps without spinning; nothing fires;
    /// the suspended ones, resumed, fire once.
    @Test func theLastOwnClockTimersCancelledOrSuspendedWhileMonotonicOnesRemain() async throws {
        if try BackendKind.uring.checkedUnavailable("the last own-clock timer's end") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            try backend.schedule(.after(.seconds(3600))) { _ in }
            try backend.schedule(.every(.seconds(1800))) { _ in }
            let fired = Locked<[String]>([])
            // Calls that began before `cancel()` (or `suspend()`) returned are allowed: on a
            // loaded machine the other thread may reach it after the date. Later ones are not.
            let stopped = Locked<Set<DeadlineClock>>([])
            let wall = try backend.schedule(.after(.milliseconds(150), on: .wall)) { _ in
                if stopped.current.contains(.wall) { fired.withLock { $0.append("wall") } }
            }
            let continuous = try backend.schedule(.after(.milliseconds(160), on: .continuous)) { _ in
                if stopped.current.contains(.continuous) { fired.withLock { $0.append("continuous") } }
            }
            blockRealTime(.milliseconds(10))  // the loop sleeps with both timeouts armed
            onNewThread {
                wall.cancel()
                stopped.withLock { _ = $0.insert(.wall) }
                continuous.cancel()
                stopped.withLock { _ = $0.insert(.continuous) }
            }
            blockRealTime(.milliseconds(200))  // past their deadlines
            try expectLoopSleeps(backend)
            #expect(fired.current.isEmpty)

            stopped.withLock { $0 = [] }
            let resumed = Locked(false)
            let wallAgain = try backend.schedule(.every(.milliseconds(150), on: .wall)) { _ in
                if resumed.current || stopped.current.contains(.wall) { fired.withLock { $0.append("wall") } }
            }
            let continuousAgain = try backend.schedule(.every(.milliseconds(160), on: .continuous)) { _ in
                if resumed.current || stopped.current.contains(.continuous) { fired.withLock { $0.append("continuous") } }
            }
            blockRealTime(.milliseconds(10))
            onNewThread {
                do {
                    try wallAgain.suspend()
                    stopped.withLock { _ = $0.insert(.wall) }
                    try continuousAgain.suspend()
                    stopped.withLock { _ = $0.insert(.continuous) }
                } catch {
                    Issue.record("\(error)")
                }
            }
            blockRealTime(.milliseconds(200))
            try expectLoopSleeps(backend)
            #expect(fired.current.isEmpty, "suspended timers fired: \(fired.current)")
            stopped.withLock { $0 = [] }
            resumed.withLock { $0 = true }
            onNewThread {
                do {
                    try wallAgain.resume()
                    try continuousAgain.resume()
                } catch {
                    Issue.record("\(error)")
                }
            }
            #expect(waitFor { Set(fired.current) == ["wall", "continuous"] }, "\(fired.current)")
            wallAgain.cancel()
            continuousAgain.cancel()
        }
    }

    // MARK: Cancel, suspend, resume racing the fire

    /// Promise: cancel and suspend from another thread race the fire of repeating wall and
    /// continuous timers (every 1 ms) safely: after `cancelAndWait()` returns no call begins;
    /// after `cancel()` at most the call already begun; double cancel, resume and reschedule
    /// after cancel change nothing (the latter two throw `timerEnded`). Suspended timers stay
    /// quiet and fire again once resumed.
    @Test func cancelSuspendAndResumeRaceRepeatingOwnClockFires() async throws {
        if try BackendKind.uring.checkedUnavailable("the cancel race") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            try backend.schedule(.every(.milliseconds(3))) { _ in }  // a monotonic neighbour
            for round in 0..<30 {
                let clock: DeadlineClock = round % 2 == 0 ? .wall : .continuous
                let calls = Counter()
                let handle = try backend.schedule(.every(.milliseconds(1), on: clock)) { _ in calls.increment() }
                let suspended = Atomic<Bool>(false)
                let callsWhileSuspended = Counter()
                let other = try backend.schedule(.every(.milliseconds(1), on: clock == .wall ? .continuous : .wall)) { _ in
                    if suspended.load(ordering: .acquiring) { callsWhileSuspended.increment() }
                }
                blockRealTime(.microseconds(500 * (round % 7)))
                let snapshot = Locked<Int>(-1)
                onNewThread {
                    do {
                        try other.suspend()
                        suspended.store(true, ordering: .releasing)
                    } catch {
                        Issue.record("suspend: \(error)")
                    }
                    if round % 3 == 0 {
                        handle.cancelAndWait()
                        snapshot.withLock { $0 = calls.current }
                    } else {
                        handle.cancel()
                        snapshot.withLock { $0 = calls.current + 1 }  // the call already begun, if any
                    }
                    handle.cancel()
                }
                blockRealTime(.milliseconds(15))
                #expect(calls.current <= snapshot.current, "round \(round) (\(clock)): \(calls.current) calls, \(snapshot.current) allowed")
                #expect(callsWhileSuspended.current <= 1, "round \(round): \(callsWhileSuspended.current) calls while suspended")
                #expect(throws: TimerError.self) { try handle.resume() }
                #expect(throws: TimerError.self) { try handle.reschedule(.after(.milliseconds(1), on: clock)) }
                #expect(handle.currentState == .cancelled)
                suspended.store(false, ordering: .releasing)
                onNewThread {
                    do { try other.resume() } catch { Issue.record("resume: \(error)") }
                }
                #expect(waitFor(.seconds(5)) { other.fireCount > 0 }, "round \(round)")
                let countAtResume = other.fireCount
                #expect(waitFor(.seconds(5)) { other.fireCount >= countAtResume + 3 }, "round \(round): the resumed timer fires again")
                other.cancel()
                blockRealTime(.milliseconds(3))
                #expect(calls.current <= snapshot.current)
            }
        }
    }

    // MARK: Bursts

    /// Promise: a burst of more than 4,096 due timers on one clock fires in full. Here 5,000 on
    /// the continuous clock and 5,000 on the wall clock, due at the same moment, with monotonic
    /// ones in between: each fires exactly once, and timers with equal deadlines fire in the
    /// order they were scheduled.
    @Test func burstsOfMoreThan4096OnBothOwnClocksAtOnceFireInFullAndInOrder() async throws {
        if try BackendKind.uring.checkedUnavailable("the own-clock bursts") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let perClock = 5_000
            let order = Locked<[DeadlineClock: [Int]]>([:])
            let date = Date().addingTimeInterval(0.08)
            let delay = Duration.milliseconds(80)
            for index in 0..<perClock {
                try backend.schedule(.at(date: date)) { _ in order.withLock { $0[.wall, default: []].append(index) } }
                try backend.schedule(.after(delay, on: .continuous)) { _ in order.withLock { $0[.continuous, default: []].append(index) } }
                if index % 50 == 0 {
                    try backend.schedule(.after(delay)) { _ in order.withLock { $0[.monotonic, default: []].append(index) } }
                }
            }
            let total = { order.current.values.reduce(0) { $0 + $1.count } }
            let expected = 2 * perClock + perClock / 50
            #expect(waitFor { total() == expected }, "\(total()) of \(expected) fired")
            blockRealTime(.milliseconds(50))
            #expect(total() == expected)
            // The continuous timers' deadlines are read one by one (each later): in order too.
            for clock in DeadlineClock.allCases {
                let seen = order.current[clock] ?? []
                #expect(seen == seen.sorted(), "\(clock) out of order")
            }
            #expect((order.current[.wall] ?? []) == Array(0..<perClock), "wall timers with one date out of order")
        }
    }

    // MARK: Grids

    /// Promise: repeating timers on the wall and continuous clocks keep firing on their grid:
    /// every call comes at or after its grid point (start + k·interval, counting skipped
    /// points), never before, and all the calls asked for come.
    @Test func repeatingOwnClockTimersKeepFiringOnTheirGrid() async throws {
        if try BackendKind.uring.checkedUnavailable("the own-clock grids") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let interval: UInt64 = 7_000_000
            let count = 25
            let problems = Locked<[String]>([])
            let calls = Locked<[DeadlineClock: Int]>([:])
            /// Checks that each call comes at or after its grid point (`first` the point of
            /// the first call, skipped points counted) on `clock`, read by `read`, and counts it.
            @Sendable func onTheGrid(_ clock: DeadlineClock, from start: UInt64, first: UInt64, _ read: @escaping @Sendable () -> UInt64)
                -> @Sendable (Tick) -> Void
            {
                let points = Locked<UInt64>(first)
                return { tick in
                    let now = read()
                    let point = points.withLock { points in
                        points += UInt64(tick.missed)
                        defer { points += 1 }
                        return points
                    }
                    if now < start + point * interval {
                        problems.withLock { $0.append("\(clock) call \(tick.index) before grid point \(point)") }
                    }
                    calls.withLock { $0[clock, default: 0] += 1 }
                }
            }
            let start = Date().addingTimeInterval(0.01)
            try backend.schedule(
                .every(.nanoseconds(Int64(interval)), from: start, count: count),
                handler: onTheGrid(.wall, from: nanoseconds(of: start), first: 0, wallNanoseconds))
            // A delay's first point is one interval after its start.
            try backend.schedule(
                .every(.nanoseconds(Int64(interval)), on: .continuous, count: count),
                handler: onTheGrid(.continuous, from: bootNanoseconds(), first: 1, bootNanoseconds))
            // Monotonic traffic beside them, on a grid that falls between theirs.
            try backend.schedule(.every(.microseconds(3_100))) { _ in }
            #expect(waitFor { calls.current == [.wall: count, .continuous: count] }, "\(calls.current)")
            blockRealTime(.milliseconds(30))
            #expect(calls.current == [.wall: count, .continuous: count], "\(calls.current)")
            #expect(problems.current.isEmpty, "\(problems.current.prefix(10))")
        }
    }

    // MARK: Far future and past dates

    /// Promise: dates in the far future (`Date.distantFuture`, the year 3000, the year 2100 whose
    /// deadline a `CLOCK_REALTIME` timeout can hold) never fire and do not make the loop spin,
    /// nor do far continuous delays; dates in the past (1970, `distantPast`, a minute ago, a grid
    /// that started an hour ago) fire at once, once.
    @Test func farFutureDatesNeverFireAndPastDatesFireAtOnceOnce() async throws {
        if try BackendKind.uring.checkedUnavailable("the far and past dates") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let farFired = Locked<[String]>([])
            let year3000 = Date(timeIntervalSince1970: 32_503_680_000)
            let year2100 = Date(timeIntervalSince1970: 4_102_444_800)
            let far: [(String, TimerSchedule)] = [
                ("distantFuture", .at(date: .distantFuture)), ("3000", .at(date: year3000)), ("2100", .at(date: year2100)),
                ("every from 3000", .every(.seconds(1), from: year3000)),
                ("every from 2100", .every(.milliseconds(1), from: year2100)),
                ("continuous 100 years", .after(.seconds(3_155_760_000), on: .continuous)),
                ("continuous max", .after(.seconds(Int64.max), on: .continuous)),
                ("wall max", .after(.seconds(Int64.max), on: .wall)),
            ]
            for (name, schedule) in far { try backend.schedule(schedule) { _ in farFired.withLock { $0.append(name) } } }
            // Near ones moved beyond the horizon from another thread: the loop wakes at their old
            // deadlines (their entries stay put), finds them later, and parks its timeouts.
            let year2201 = Date(timeIntervalSince1970: 7_289_654_400)
            let movedFar: [(String, TimerSchedule, TimerSchedule)] = [
                ("wall to 2201", .after(.milliseconds(100), on: .wall), .at(date: year2201)),
                ("wall to distantFuture", .at(date: Date().addingTimeInterval(0.1)), .at(date: .distantFuture)),
                ("continuous to 200 years", .after(.milliseconds(100), on: .continuous), .after(.seconds(6_311_520_000), on: .continuous)),
            ]
            // A call that began before its move returned is allowed (a stalled thread may reach
            // the move after the old deadline); one after it is not.
            let moved = Locked<Set<String>>([])
            for (name, near, far) in movedFar {
                let handle = try backend.schedule(near) { _ in
                    if moved.current.contains(name) { farFired.withLock { $0.append(name) } }
                }
                blockRealTime(.milliseconds(2))
                onNewThread {
                    do { try handle.reschedule(far) } catch { Issue.record("\(name): \(error)") }
                    moved.withLock { _ = $0.insert(name) }
                }
            }
            try backend.schedule(.at(date: year2201)) { _ in farFired.withLock { $0.append("2201") } }
            blockRealTime(.milliseconds(150))  // past the moved ones' old deadlines
            try expectLoopSleeps(backend)

            let pastFires = Locked<[String: Int]>([:])
            let past: [(String, TimerSchedule)] = [
                ("1970", .at(date: Date(timeIntervalSince1970: 0))), ("distantPast", .at(date: .distantPast)),
                ("a minute ago", .at(date: Date(timeIntervalSinceNow: -60))),
                ("every hour from an hour and a second ago", .every(.seconds(3600), from: Date(timeIntervalSinceNow: -3601))),
                ("continuous zero", .after(.zero, on: .continuous)),
            ]
            onNewThread {  // from another thread, while the loop sleeps
                for (name, schedule) in past {
                    do { try backend.schedule(schedule) { _ in pastFires.withLock { $0[name, default: 0] += 1 } } } catch {
                        Issue.record("\(name): \(error)")
                    }
                }
            }
            #expect(waitFor { pastFires.current.count == past.count }, "\(pastFires.current)")
            blockRealTime(.milliseconds(100))
            #expect(pastFires.current.values.allSatisfy { $0 == 1 }, "\(pastFires.current)")
            try expectLoopSleeps(backend)
            #expect(farFired.current.isEmpty, "far-future timers fired: \(farFired.current)")
        }
    }

    // MARK: Shutdown

    /// Promise: `shutdown()` from inside a handler of a wall or continuous timer ends everything:
    /// no handler (of any clock) runs after that handler returns, `schedule` throws, the loop
    /// thread ends, and a second `shutdown()` from outside returns.
    @Test(arguments: [DeadlineClock.continuous, .wall])
    func shutdownFromInsideAnOwnClockHandlerEndsEverything(_ clock: DeadlineClock) async throws {
        if try BackendKind.uring.checkedUnavailable("the shutdown from a handler") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let afterShutdown = Counter()
            let returned = Atomic<Bool>(false)
            let calls = Counter()
            for other in DeadlineClock.allCases {
                try backend.schedule(.every(.milliseconds(1), on: other)) { _ in
                    if returned.load(ordering: .acquiring) { afterShutdown.increment() }
                }
            }
            try backend.schedule(.after(.milliseconds(20), on: clock)) { _ in
                calls.increment()
                backend.shutdown()
                returned.store(true, ordering: .releasing)
            }
            #expect(waitFor { returned.load(ordering: .acquiring) })
            blockRealTime(.milliseconds(50))
            backend.shutdown()
            #expect(afterShutdown.current == 0, "\(afterShutdown.current) calls after shutdown() returned in a handler")
            #expect(calls.current == 1)
            #expect(throws: TimerError.backendShutDown(backend: "io_uring")) { try backend.schedule(.after(.zero, on: clock)) { _ in } }
            #expect(
                waitFor { !FileManager.default.fileExists(atPath: "/proc/self/task/\(backend.loopThreadID)") }, "the loop thread lives on")
        }
    }

    /// Promise: `shutdown()` from another thread, racing the fires of wall and continuous timers
    /// (repeating every 0.5 ms, and one-shots due around that moment), returns, and once it has
    /// returned no handler runs. Thirty rounds at varying moments.
    @Test func shutdownFromAnotherThreadRacingOwnClockFires() async throws {
        if try BackendKind.uring.checkedUnavailable("the shutdown race") { return }
        try await withWatchdog { () async throws in
            for round in 0..<30 {
                let backend = try IOURingBackend(registry: TimerRegistry())
                let calls = Counter()
                let base = Date()
                for index in 0..<40 {
                    try backend.schedule(.at(date: base.addingTimeInterval(0.002 + Double(index) * 0.000_25))) { _ in calls.increment() }
                    try backend.schedule(.after(.microseconds(2_000 + 250 * index), on: .continuous)) { _ in calls.increment() }
                }
                try backend.schedule(.every(.microseconds(500), on: .wall)) { _ in calls.increment() }
                try backend.schedule(.every(.microseconds(500), on: .continuous)) { _ in calls.increment() }
                let done = DispatchSemaphore(value: 0)
                let atReturn = Locked<Int>(-1)
                onBackgroundThread {
                    blockRealTime(.microseconds(300 * (round % 17)))
                    backend.shutdown()
                    atReturn.withLock { $0 = calls.current }
                    done.signal()
                }
                #expect(done.wait(timeout: .now() + .seconds(10)) == .success, "round \(round): shutdown() did not return")
                blockRealTime(.milliseconds(10))
                #expect(
                    calls.current == atReturn.current, "round \(round): \(calls.current - atReturn.current) calls after shutdown() returned"
                )
                #expect(backend.registry.count == 0)
            }
        }
    }

    // MARK: Re-entrant releases

    /// Promise: a handler whose captures' `deinit` schedules and cancels timers on the same
    /// backend does not deadlock, whether the capture goes when its wall or continuous timer
    /// ends by firing, by a cancel from another thread, by a reschedule's end of its count, or
    /// at shutdown; the timers the `deinit`s scheduled fire (before the shutdown).
    @Test func deinitOfCapturesCallingBackIntoTheBackendDoesNotDeadlock() async throws {
        if try BackendKind.uring.checkedUnavailable("the re-entrant releases") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let deinits = Counter()
            let scheduledByDeinit = Counter()
            func capture(_ clock: DeadlineClock) throws -> CallsBackOnDeinit {
                let victim = try backend.schedule(.after(.seconds(3600), on: clock)) { _ in }
                return CallsBackOnDeinit(backend: backend, victim: victim, clock: clock, deinits: deinits, fired: scheduledByDeinit)
            }
            for clock in [DeadlineClock.continuous, .wall] {
                // Ends by firing (a one-shot, and a repeat that runs out), on the loop thread.
                do {
                    let captured = try capture(clock)
                    try backend.schedule(.after(.milliseconds(5), on: clock)) { _ in _ = captured }
                }
                do {
                    let captured = try capture(clock)
                    try backend.schedule(.every(.milliseconds(2), on: clock, count: 3)) { _ in _ = captured }
                }
                // Cancelled from another thread.
                let cancelled = try { () throws -> TimerHandle in
                    let captured = try capture(clock)
                    return try backend.schedule(.every(.milliseconds(1), on: clock)) { _ in _ = captured }
                }()
                blockRealTime(.milliseconds(5))
                onNewThread { cancelled.cancel() }
                // Rescheduled to one last fire.
                let rescheduled = try { () throws -> TimerHandle in
                    let captured = try capture(clock)
                    return try backend.schedule(.every(.milliseconds(1), on: clock)) { _ in _ = captured }
                }()
                onNewThread {
                    do { try rescheduled.reschedule(.after(.milliseconds(2), on: clock)) } catch { Issue.record("\(error)") }
                }
            }
            #expect(waitFor { deinits.current == 8 }, "\(deinits.current) of 8 captures released")
            #expect(waitFor { scheduledByDeinit.current == 8 }, "\(scheduledByDeinit.current) of 8 timers scheduled by deinit fired")
            // Released by the shutdown, from another thread: their deinit's schedule is refused.
            for clock in [DeadlineClock.continuous, .wall] {
                let captured = try capture(clock)
                try backend.schedule(.after(.seconds(3600), on: clock)) { _ in _ = captured }
            }
            onNewThread { backend.shutdown() }
            #expect(waitFor { deinits.current == 10 }, "\(deinits.current) of 10 captures released")
        }
    }

    /// A backend whose last reference is held by its own wall (or continuous) timer's handler
    /// goes when that timer ends on the loop thread: its `deinit` shuts it down from inside the
    /// loop. Nothing hangs, the loop thread ends, and a key timer's `timerEnded` that schedules
    /// on the backend as it shuts down is refused, not deadlocked.
    @Test(arguments: [DeadlineClock.continuous, .wall])
    func aBackendReleasedByItsOwnOwnClockHandlerShutsDown(_ clock: DeadlineClock) async throws {
        if try BackendKind.uring.checkedUnavailable("the self-released backend") { return }
        try await withWatchdog { () async throws in
            let fired = Counter()
            let ended = Locked<[String]>([])
            let (weakBackend, threadID) = try { () throws -> (WeakBox<IOURingBackend>, Int32) in
                let backend = try IOURingBackend(registry: TimerRegistry())
                let callback = EndRecordingCallback(backend: backend, clock: clock, ended: ended)
                try backend.schedule(.after(.seconds(3600), on: clock), calling: callback)
                try backend.schedule(.after(.milliseconds(10), on: clock)) { _ in
                    _ = backend  // the last strong reference, released when this timer ends
                    fired.increment()
                }
                return (WeakBox(backend), backend.loopThreadID)
            }()
            #expect(waitFor { fired.current == 1 })
            #expect(waitFor { weakBackend.value == nil }, "the backend outlived its last reference")
            #expect(waitFor { !FileManager.default.fileExists(atPath: "/proc/self/task/\(threadID)") }, "the loop thread lives on")
            #expect(waitFor { ended.current.count == 1 }, "\(ended.current)")
            #expect(ended.current.allSatisfy { $0.hasPrefix("refused") }, "\(ended.current)")
        }
    }

    // MARK: Handlers that schedule on other clocks

    /// Handlers (on the loop thread, whose requests wake nothing: the loop reads them before it
    /// sleeps) hand on to each other across the three clocks, and one schedules a wall date
    /// earlier than the one the loop's wall timeout waits for: the chain completes, in order,
    /// and the earlier date fires first.
    @Test func handlersHandingOnAcrossTheThreeClocksFromTheLoopThread() async throws {
        if try BackendKind.uring.checkedUnavailable("the handler chain") { return }
        try await withWatchdog { () async throws in
            let backend = try IOURingBackend(registry: TimerRegistry())
            defer { backend.shutdown() }
            let hops = 45
            let seen = Locked<[Int]>([])
            let problems = Locked<[String]>([])
            @Sendable func hop(_ index: Int) {
                guard index < hops else { return }
                let clock = DeadlineClock.allCases[index % 3]
                let schedule: TimerSchedule =
                    clock == .wall ? .at(date: Date().addingTimeInterval(0.002)) : .after(.milliseconds(2), on: clock)
                do {
                    try backend.schedule(schedule) { tick in
                        if tick.clock != clock { problems.withLock { $0.append("hop \(index) fired on \(tick.clock)") } }
                        seen.withLock { $0.append(index) }
                        hop(index + 1)
                    }
                } catch {
                    problems.withLock { $0.append("hop \(index): \(error)") }
                }
            }
            try backend.schedule(.after(.milliseconds(1))) { _ in hop(0) }
            #expect(waitFor { seen.current.count == hops }, "\(seen.current.count) of \(hops) hops")
            #expect(seen.current == Array(0..<hops))
            #expect(problems.current.isEmpty, "\(problems.current)")

            let order = Locked<[String]>([])
            try backend.schedule(.at(date: Date().addingTimeInterval(0.5))) { _ in order.withLock { $0.append("later") } }
            try backend.schedule(.after(.milliseconds(10))) { _ in
                do {
                    try backend.schedule(.at(date: Date().addingTimeInterval(0.02))) { _ in order.withLock { $0.append("earlier") } }
                } catch {
                    problems.withLock { $0.append("\(error)") }
                }
            }
            #expect(waitFor { order.current.count == 2 }, "\(order.current)")
            #expect(order.current == ["earlier", "later"])
        }
    }
}

// MARK: Helpers

/// The kernel's wall clock now, in ns since 1970.
private func wallNanoseconds() -> UInt64 { DeadlineClock.read(.wall) }
/// `CLOCK_BOOTTIME` now, in ns.
private func bootNanoseconds() -> UInt64 { DeadlineClock.read(.continuous) }
/// `date` in ns since 1970, converted as `TimerSchedule.at(date:)` converts it.
private func nanoseconds(of date: Date) -> UInt64 { UInt64(date.timeIntervalSince1970 * 1e9) }

/// CPU time the thread `threadID` of this process has used, in ns (its schedstat).
private func threadCPUNanoseconds(_ threadID: Int32) -> UInt64? {
    guard let text = try? String(contentsOfFile: "/proc/self/task/\(threadID)/schedstat", encoding: .utf8) else { return nil }
    return text.split(separator: " ").first.flatMap { UInt64($0) }
}

/// Expects the loop to sleep for 400 ms: at most 2 wake-ups, and little CPU on its thread.
private func expectLoopSleeps(_ backend: IOURingBackend, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let counts = backend.loopCounts
    let waits = counts.waits
    let cpu = try #require(threadCPUNanoseconds(backend.loopThreadID), sourceLocation: sourceLocation)
    blockRealTime(.milliseconds(400))
    let cpuAfter = try #require(threadCPUNanoseconds(backend.loopThreadID), sourceLocation: sourceLocation)
    #expect(counts.waits - waits <= 2, "\(counts.waits - waits) wake-ups while nothing was due", sourceLocation: sourceLocation)
    #expect(
        cpuAfter - cpu < 40_000_000, "the loop thread used \((cpuAfter - cpu) / 1_000_000) ms of CPU in 400 ms",
        sourceLocation: sourceLocation)
}

/// A key timer's callback that hands each fire to `body`.
private final class RecordingCallback: TimerCallback {
    let body: @Sendable (TimerFire) -> Void
    init(_ body: @escaping @Sendable (TimerFire) -> Void) { self.body = body }
    func timerFired(_ fire: TimerFire) { body(fire) }
}

/// A capture whose `deinit` calls back into its backend: cancels `victim` and schedules a
/// timer on `clock` that counts its fire in `fired`.
private final class CallsBackOnDeinit: Sendable {
    let backend: IOURingBackend
    let victim: TimerHandle
    let clock: DeadlineClock
    let deinits: Counter
    let fired: Counter

    init(backend: IOURingBackend, victim: TimerHandle, clock: DeadlineClock, deinits: Counter, fired: Counter) {
        (self.backend, self.victim, self.clock, self.deinits, self.fired) = (backend, victim, clock, deinits, fired)
    }

    deinit {
        victim.cancel()
        let fired = self.fired
        _ = try? backend.schedule(.after(.milliseconds(1), on: clock)) { _ in fired.increment() }
        deinits.increment()
    }
}

/// Holds `value` weakly.
private final class WeakBox<Value: AnyObject>: @unchecked Sendable {
    // @unchecked: `value` is a weak reference, which the runtime reads and clears atomically.
    weak var value: Value?
    init(_ value: Value) { self.value = value }
}

/// A key timer's callback whose `timerEnded` schedules a timer on `clock` on the backend
/// (held weakly) and records whether that was refused.
private final class EndRecordingCallback: TimerCallback {
    let backend: WeakBox<IOURingBackend>
    let clock: DeadlineClock
    let ended: Locked<[String]>

    init(backend: IOURingBackend, clock: DeadlineClock, ended: Locked<[String]>) {
        (self.backend, self.clock, self.ended) = (WeakBox(backend), clock, ended)
    }

    func timerFired(_ fire: TimerFire) {}

    func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) {
        guard let backend = backend.value else {
            ended.withLock { $0.append("refused: backend gone (\(reason))") }
            return
        }
        do {
            try backend.schedule(.after(.milliseconds(1), on: clock)) { _ in }
            ended.withLock { $0.append("accepted (\(reason))") }
        } catch {
            ended.withLock { $0.append("refused: \(error) (\(reason))") }
        }
    }
}
