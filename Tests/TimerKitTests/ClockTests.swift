import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitTestSupport

/// The three clocks on virtual time: wall-clock steps and suspends, exactly.
@Suite("Clocks: monotonic, continuous, wall")
struct ClockTests {
    let registry = TimerRegistry()

    /// A Manual backend 1,000 s after boot, so that deadlines a step moves into the past still
    /// lie after boot (the monotonic clock, on which ticks report them, starts there).
    func makeClock() -> ManualBackend { ManualBackend(start: MonotonicInstant(nanoseconds: 1_000_000_000_000), registry: registry) }

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
