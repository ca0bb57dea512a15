import Foundation
import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// The three clocks on virtual time: wall-clock steps and suspends, exactly.
@Suite("Clocks: monotonic, continuous, wall")
struct ClockTests {
    let registry = TimerRegistry()

    /// A Manual backend 1,000 s after boot, so that deadlines a step moves into the past still
    /// lie after boot (the monotonic clock, on which ticks report them, starts there).
    func makeClock() -> ManualBackend { ManualBackend(start: MonotonicInstant(nanoseconds: 1_000_000_000_000), registry: registry) }

    /// The continuous clock is never behind the monotonic one. A reading that puts it a little
    /// behind (the monotonic readings' midpoint fell after it) counts as level: as an unsigned
    /// offset it was nearly 2^64, which put continuous deadlines before boot (such a timer
    /// fired at once, and `statistics` recorded a lateness of the machine's uptime).
    @Test func aContinuousReadingBehindTheReferenceCountsAsLevel() {
        let behind = ClockOffsets.reading(continuous: 1_000_000, wall: 5_000_000, against: 1_000_400)
        #expect(behind.continuous == 0)
        #expect(behind.wall == 3_999_600)
        let ahead = ClockOffsets.reading(continuous: 9_000_000, wall: 5_000_000, against: 1_000_000)
        #expect(ahead.continuous == 8_000_000)
        // And a reading of the kernel's clocks never yields a "negative" continuous offset.
        for _ in 0..<10_000 {
            let offsets = SchedulerClock.monotonic.offsets(fixed: ClockOffsets(continuous: 0, wall: 0))
            #expect(offsets.continuous < 1 << 62)
            if offsets.continuous >= 1 << 62 { break }
        }
    }

    @Test func aWallTimerFiresAtItsDate() throws {
        let clock = makeClock()
        defer { clock.shutdown() }
        #expect(clock.wallClock == Date(timeIntervalSince1970: 1_767_225_600))
        let log = TickLog()
        let start = clock.now()
        try clock.schedule(.at(date: clock.wallClock.addingTimeInterval(10)), handler: log.record)
        clock.advance(by: .milliseconds(9_999))
        #expect(log.count == 0)
        clock.advance(by: .milliseconds(1))
        let tick = try #require(log.all.first)
        #expect(tick.clock == .wall && !tick.clockChanged)
        #expect(tick.scheduled == start + .seconds(10) && tick.lateness == .zero)
        #expect(clock.wallClock == Date(timeIntervalSince1970: 1_767_225_610))
    }

    /// A step forward past a wall deadline fires it at once, once, late by what was jumped
    /// past; observers and statistics hear of the step.
    @Test func aForwardStepFiresWhatItJumpedPastOnceAndLate() throws {
        let clock = makeClock()
        defer { clock.shutdown() }
        let log = TickLog()
        let events = Locked<[String]>([])
        clock.addEventObserver { event in
            if case .clockChanged(let backend, let kind, let step) = event { events.withLock { $0.append("\(backend) \(kind) \(step)") } }
        }
        let monotonic = TickLog()
        try clock.schedule(.at(date: clock.wallClock.addingTimeInterval(60)), handler: log.record)
        try clock.schedule(.after(.seconds(60)), handler: monotonic.record)
        clock.stepWallClock(by: .seconds(120))
        #expect(log.count == 1)
        let tick = try #require(log.all.first)
        #expect(tick.clockChanged && tick.lateness == .seconds(60))
        #expect(monotonic.count == 0, "a monotonic deadline ignores the wall clock")
        #expect(events.current == ["manual wall 120.0 seconds"])
        #expect(clock.statistics.clockChanges == 1)
        clock.advance(by: .seconds(60))
        #expect(log.count == 1 && monotonic.count == 1)
    }

    /// A step back never makes a wall timer fire before its date: it fires when the wall
    /// clock reaches the date again.
    @Test func aBackwardStepNeverMakesAWallTimerFireEarly() throws {
        let clock = makeClock()
        defer { clock.shutdown() }
        let log = TickLog()
        let date = clock.wallClock.addingTimeInterval(60)
        try clock.schedule(.at(date: date)) { tick in
            log.record(tick)
            #expect(clock.wallClock >= date)
        }
        clock.advance(by: .seconds(30))
        clock.stepWallClock(by: .seconds(-3_600))
        clock.advance(by: .seconds(30))
        #expect(log.count == 0)
        clock.advance(by: .seconds(3_599))
        #expect(log.count == 0)
        clock.advance(by: .seconds(1))
        let tick = try #require(log.all.first)
        #expect(tick.clockChanged && tick.lateness == .zero)
    }

    /// A suspend: continuous and wall deadlines that came due fire once on resume; a
    /// monotonic one keeps its deadline, which the suspend did not bring nearer.
    @Test func onResumeContinuousAndWallTimersThatCameDueFireOnce() throws {
        let clock = makeClock()
        defer { clock.shutdown() }
        let fired = Locked<[String]>([])
        for kind in DeadlineClock.allCases {
            try clock.schedule(.after(.seconds(60), on: kind)) { tick in
                fired.withLock { $0.append("\(tick.clock) changed=\(tick.clockChanged) late=\(tick.lateness)") }
            }
        }
        clock.simulateSuspend(for: .seconds(120))
        #expect(fired.current.sorted() == ["continuous changed=true late=60.0 seconds", "wall changed=true late=60.0 seconds"])
        clock.advance(by: .seconds(60))
        #expect(fired.current.last == "monotonic changed=false late=0.0 seconds")
    }

    /// A repeating timer on the continuous clock meets a suspend with its missed-tick policy:
    /// `.skip` fires the latest grid point once and counts the ones dropped.
    @Test func aRepeatingContinuousTimerSkipsWhatTheSuspendCovered() throws {
        let clock = makeClock()
        defer { clock.shutdown() }
        let log = TickLog()
        try clock.schedule(.every(.seconds(10), on: .continuous), handler: log.record)
        clock.advance(by: .seconds(10))
        #expect(log.count == 1)
        clock.simulateSuspend(for: .seconds(35))
        #expect(log.count == 2)
        let tick = try #require(log.all.last)
        #expect(tick.missed == 2 && tick.clockChanged && tick.lateness == .seconds(5))
        clock.advance(by: .seconds(5))
        #expect(log.count == 3 && log.all.last?.missed == 0 && log.all.last?.clockChanged == false)
    }

    /// A wall-clock grid (`every(_:from:)`) keeps to its dates across a forward step.
    @Test func aWallGridKeepsItsDatesAcrossAStep() throws {
        let clock = makeClock()
        defer { clock.shutdown() }
        let log = TickLog()
        let origin = clock.wallClock
        try clock.schedule(.every(.seconds(10), from: origin.addingTimeInterval(10)), handler: log.record)
        clock.advance(by: .seconds(10))
        clock.stepWallClock(by: .seconds(25))  // wall clock at origin + 35
        #expect(log.count == 2 && log.all.last?.missed == 1)
        clock.advance(by: .seconds(5))  // origin + 40
        #expect(log.count == 3 && clock.wallClock == origin.addingTimeInterval(40))
    }

    @Test func rescheduleMovesATimerBetweenClocksAndDatesBefore1970FireAtOnce() throws {
        let clock = makeClock()
        defer { clock.shutdown() }
        let log = TickLog()
        let timer = try clock.schedule(.after(.seconds(60)), handler: log.record)
        try timer.reschedule(.at(date: clock.wallClock.addingTimeInterval(5)))
        clock.advance(by: .seconds(5))
        #expect(log.all.map(\.clock) == [.wall])
        try clock.schedule(.at(date: Date(timeIntervalSince1970: -1_000)), handler: log.record)
        clock.runDue()
        #expect(log.count == 2)
        #expect(throws: TimerError.negativeDuration(parameter: "delay", value: .seconds(-1))) {
            try clock.schedule(.after(.seconds(-1), on: .wall)) { _ in }
        }
        try clock.schedule(.at(date: .distantFuture), handler: log.record)
        clock.stepWallClock(by: .seconds(1_000_000))
        clock.advance(by: .seconds(1_000_000))
        #expect(log.count == 2, "a date past the horizon never comes")
    }

    /// With no timer on another clock, steps and suspends change nothing and cost nothing.
    @Test func withOnlyMonotonicTimersAStepIsNotAnEvent() throws {
        let clock = makeClock()
        defer { clock.shutdown() }
        try clock.schedule(.after(.seconds(60))) { _ in }
        clock.stepWallClock(by: .seconds(30))
        clock.simulateSuspend(for: .seconds(30))
        #expect(clock.statistics.clockChanges == 0)
    }
}

/// Calendar schedules on the virtual wall clock: daylight-saving changes and leap days.
@Suite("Clocks: calendar schedules")
struct CalendarScheduleTests {
    let registry = TimerRegistry()
    let newYork = TimeZone(identifier: "America/New_York") ?? .gmt

    /// Fires of a schedule over `days` of virtual time from `start`, as dates.
    func fires(of schedule: TimerSchedule, from start: Date, days: Int) throws -> [Date] {
        let clock = ManualBackend(start: MonotonicInstant(nanoseconds: 1_000_000_000_000), registry: registry, wallClockStart: start)
        defer { clock.shutdown() }
        let dates = Locked<[Date]>([])
        try clock.schedule(schedule) { _ in dates.withLock { $0.append(clock.wallClock) } }
        for _ in 0..<(days * 24) { clock.advance(by: .seconds(3_600)) }
        return dates.current
    }

    /// 02:30 does not exist on 8 March 2026 in New York (02:00 → 03:00): that day fires at
    /// 03:00 EDT, the first moment after the gap, and the next day at 02:30 again.
    @Test func aTimeTheSpringChangeSkipsFiresRightAfterTheGap() throws {
        let dates = try fires(of: .daily(at: 2, 30, in: newYork), from: Date(timeIntervalSince1970: 1_772_800_000), days: 4)
        #expect(dates.map(\.timeIntervalSince1970) == [1_772_868_600, 1_772_953_200, 1_773_037_800, 1_773_124_200])
    }

    /// 01:30 happens twice on 1 November 2026 in New York (02:00 → 01:00): it fires once, at
    /// the first; the days around it are 24 and 25 hours apart.
    @Test func aTimeTheAutumnChangeRepeatsFiresOnce() throws {
        let dates = try fires(of: .daily(at: 1, 30, in: newYork), from: Date(timeIntervalSince1970: 1_793_400_000), days: 4)
        #expect(dates.map(\.timeIntervalSince1970) == [1_793_424_600, 1_793_511_000, 1_793_601_000, 1_793_687_400])
    }

    /// 29 February at noon UTC, from 1 January 2026: the next is in 2028, then 2032.
    @Test func aLeapDayFiresOnlyInLeapYears() throws {
        var utc = Calendar(identifier: .gregorian)
        utc.timeZone = .gmt
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let dates = Locked<[Date]>([])
        let timer = try clock.schedule(.calendar(matching: DateComponents(month: 2, day: 29, hour: 12), in: utc, count: 2)) { _ in
            dates.withLock { $0.append(clock.wallClock) }
        }
        #expect(timer.snapshot.nextDeadline == clock.now() + .seconds(68_212_800))  // 2028-02-29 12:00 UTC
        for _ in 0..<8 { clock.advance(by: .seconds(366 * 86_400)) }
        let expected = [1_835_438_400.0, 1_961_668_800.0]  // 2028-02-29 and 2032-02-29, 12:00 UTC
        #expect(dates.current.map(\.timeIntervalSince1970) == expected)
        #expect(timer.currentState == .finished)
    }

    @Test func componentsNoDateMatchesAreRefusedByName() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        var utc = Calendar(identifier: .gregorian)
        utc.timeZone = .gmt
        #expect(throws: TimerError.self) { try clock.schedule(.calendar(matching: DateComponents(month: 2, day: 30), in: utc)) { _ in } }
        do {
            try clock.schedule(.calendar(matching: DateComponents(month: 2, day: 30), in: utc)) { _ in }
        } catch {
            guard case .invalidOption(let name, _, _) = error else { throw error }
            #expect(name == "calendar components")
        }
        #expect(throws: TimerError.invalidCount(0)) { try clock.schedule(.daily(at: 2, in: .gmt, count: 0)) { _ in } }
    }

    /// A daily timer whose date a suspend passed fires once on resume, then at the next date.
    @Test func aDateASuspendPassedFiresOnceOnResume() throws {
        let clock = ManualBackend(start: MonotonicInstant(nanoseconds: 1_000_000_000_000), registry: registry)
        defer { clock.shutdown() }
        let log = TickLog()
        try clock.schedule(.daily(at: 6, in: .gmt), handler: log.record)  // wall clock starts 2026-01-01 00:00 UTC
        clock.simulateSuspend(for: .seconds(3 * 86_400))
        #expect(log.count == 1 && log.all.first?.clockChanged == true)
        clock.advance(by: .seconds(6 * 3_600))  // 2026-01-04 06:00
        #expect(log.count == 2)
    }
}
