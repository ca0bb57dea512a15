import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// The key path's own limits and costs, on virtual time (its contract runs on every backend in
/// the conformance checks' `keys` group and with `BackendUnderTest.throughKeys`).
@Suite("Timers scheduled with a key")
struct KeyPathTests {
    /// One callback type per depth of nesting: distinct types made at run time.
    final class Layer<Inner>: TimerCallback {
        func timerFired(_ fire: TimerFire) {}
    }

    /// Schedules one timer with a callback of each of `count` distinct types, nesting `Layer`
    /// one level deeper each time; returns the error of the first refused, if any.
    static func scheduleDistinctTypes<Inner>(_: Inner.Type, count: Int, on backend: ManualBackend) -> TimerError? {
        guard count > 0 else { return nil }
        do throws(TimerError) {
            try backend.schedule(.after(.seconds(3600)), calling: Layer<Inner>())
        } catch {
            return error
        }
        return scheduleDistinctTypes(Layer<Inner>.self, count: count - 1, on: backend)
    }

    @Test func aBackendTakes255CallbackTypesAndRefusesTheNextWithATypedError() {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        #expect(Self.scheduleDistinctTypes(Int.self, count: 255, on: backend) == nil)
        let refused = Self.scheduleDistinctTypes(String.self, count: 1, on: backend)
        guard case .invalidOption(let name, _, let allowed)? = refused else {
            Issue.record("the 256th callback type was not refused: \(String(describing: refused))")
            return
        }
        #expect(name == "callback" && allowed.contains("255"))
        // Types already known still schedule.
        #expect(throws: Never.self) { try backend.schedule(.after(.seconds(1)), calling: Layer<Int>()) }
        #expect(backend.statistics.liveTimers == 256)
    }

    @Test func aKeyIsAPlainValueAndSchedulingThroughOneAllocatesNoHandle() throws {
        #expect(_isPOD(TimerKey.self))
        #expect(MemoryLayout<TimerKey>.size == 12)
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        final class Quiet: TimerCallback { func timerFired(_ fire: TimerFire) {} }
        let callback = Quiet()
        let key = try backend.schedule(.after(.seconds(60)), calling: callback)
        // The record holds the callback; no front was made for the timer.
        #expect(backend.scheduler.isPlainRecord(key, ownedBy: callback))
    }
}
