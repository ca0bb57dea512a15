import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// Which due timer fires first when timers on different clocks are overdue together.
@Suite("Overdue timers across clocks")
struct OverdueOrderTests {
    /// The defect this pins: the conversion that clamps a due deadline to now (right for when to
    /// wake) ordered the due heads, so every overdue head looked equally due and the sequence
    /// numbers decided: monotonic +3, continuous +2, continuous +4, wall +1.
    @Test func overdueTimersOnThreeClocksFireInDeadlineOrderAfterAStall() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let order = Locked<[String]>([])
        for (name, seconds, clock) in [
            ("continuous+4", 4, DeadlineClock.continuous), ("monotonic+3", 3, .monotonic), ("continuous+2", 2, .continuous),
            ("wall+1", 1, .wall),
        ] {
            try backend.schedule(.after(.seconds(seconds), on: clock)) { _ in order.withLock { $0.append(name) } }
        }
        backend.stall(for: .seconds(5))
        backend.runDue()
        #expect(order.current == ["wall+1", "continuous+2", "monotonic+3", "continuous+4"])
    }

    /// Overdue by different amounts on the wall clock after a step, and on the continuous clock
    /// after a suspend: the one due longest still comes first.
    @Test func aStepAndASuspendKeepTheOrderOfWhatTheyMadeDue() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let order = Locked<[String]>([])
        try backend.schedule(.after(.seconds(30), on: .monotonic)) { _ in order.withLock { $0.append("monotonic+30") } }
        try backend.schedule(.after(.seconds(20), on: .wall)) { _ in order.withLock { $0.append("wall+20") } }
        try backend.schedule(.after(.seconds(10), on: .continuous)) { _ in order.withLock { $0.append("continuous+10") } }
        backend.stall(for: .seconds(31))
        backend.runDue()
        #expect(order.current == ["continuous+10", "wall+20", "monotonic+30"])
    }

    @Test func theDueOrderIsNotClampedAndTheWakeUpIs() {
        let readings = ClockReadings(monotonic: 10_000, continuous: 50_000, wall: 2_000_000)
        #expect(readings.dueOrder(40_000, on: .continuous) == 0)  // 10 µs overdue on its clock
        #expect(readings.dueOrder(1_990_000, on: .wall) == 0)
        #expect(readings.dueOrder(1_000, on: .continuous) < readings.dueOrder(1_995_000, on: .wall))
        #expect(readings.monotonic(1_000, on: .continuous) == 10_000)  // when to wake: now
        #expect(readings.dueOrder(.max - 1, on: .wall) > Int128(UInt64.max - 3_000_000))
    }
}
