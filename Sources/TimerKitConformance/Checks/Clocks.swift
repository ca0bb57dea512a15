import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit

extension Checks {
    /// Deadlines on the wall and continuous clocks. (Steps and suspends are checked exactly on
    /// `ManualBackend`; a check here must never set the host's clock.)
    enum Clocks {
        /// A wall timer fires no earlier than its date on the backend's wall clock (to the
        /// microsecond a `Date` resolves).
        static func aWallTimerFiresNoEarlierThanItsDate(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let backend = h.backend
            let date = backend.wallClock.addingTimeInterval(0.03)
            let seen = Locked<[Date]>([])
            let log = TickLog()
            try backend.schedule(.at(date: date)) { tick in
                seen.withLock { $0.append(backend.wallClock) }
                log.record(tick)
            }
            #expect(h.waitUntil { log.count == 1 })
            let firedAt = try #require(seen.current.first)
            #expect(firedAt.timeIntervalSince(date) >= -1e-6, "fired at \(firedAt), before \(date)")
            let tick = try #require(log.all.first)
            #expect(tick.clock == .wall && !tick.clockChanged)
            expectOnTime(tick, "the wall timer", on: kind)
        }

        /// A timer on the continuous clock fires after its delay (no suspend happens here, so
        /// the monotonic clock measures the same delay).
        static func aContinuousTimerFiresAfterItsDelay(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let log = TickLog()
            let before = h.backend.now()
            try h.backend.schedule(.after(ms(20), on: .continuous), handler: log.record)
            #expect(h.waitUntil { log.count == 1 })
            let tick = try #require(log.all.first)
            #expect(tick.clock == .continuous && tick.actual >= before + ms(20))
            expectOnTime(tick, "the continuous timer", on: kind)
        }

        /// A wall-clock grid (`every(_:from:)`) fires on its dates, one interval apart.
        static func aWallGridFiresOnItsDates(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness()
            defer { h.shutdown() }
            let log = TickLog()
            let timer = try h.backend.schedule(
                .every(ms(20), from: h.backend.wallClock.addingTimeInterval(0.02), count: 3), handler: log.record)
            #expect(h.waitUntil { timer.currentState == .finished })
            let ticks = log.all
            #expect(ticks.map(\.index) == [0, 1, 2])
            #expect(ticks.allSatisfy { $0.clock == .wall })
            for tick in ticks { expectOnTime(tick, on: kind) }
            if ticks.count == 3 {
                // Scheduled times are the grid's dates, one interval apart (to the ns a Date's
                // conversion rounds), or whole intervals when a late tick skipped some.
                for (earlier, later) in zip(ticks, ticks.dropFirst()) {
                    let gap = later.scheduled - earlier.scheduled - ms(20) * (1 + later.missed)
                    #expect(gap < .microseconds(1) && gap > .microseconds(-1), "\(gap) off the grid (\(later.missed) missed)")
                }
            }
        }
    }
}
