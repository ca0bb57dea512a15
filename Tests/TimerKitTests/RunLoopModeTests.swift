import Dispatch
import Foundation
import Testing
@testable import TimerKit

/// Runs `body` on a fresh thread with its own run loop and waits for it to finish.
func onRunLoopThread(_ body: @escaping @Sendable () -> Void) throws {
    let thread = try LoopThread(body)
    thread.join()
}

@Suite("RunLoop modes")
struct RunLoopModeTests {
    static let tracking = RunLoop.Mode("TimerKitTracking")

    struct Counts: Sendable {
        var defaultTicks: [Tick] = []
        var commonTicks: [Tick] = []
    }

    @Test func aDefaultTimerWaitsInATrackingModeWhileACommonTimerFires() throws {
        let counts = Locked(Counts())
        let duringTracking = Locked(Counts())
        let registry = TimerRegistry()
        try onRunLoopThread {
            let backend = RunLoopBackend(attachedTo: .current, registry: registry)
            defer { backend.shutdown() }
            backend.addCommonMode(Self.tracking)
            _ = try? backend.schedule(.every(.milliseconds(10))) { tick in counts.withLock { $0.defaultTicks.append(tick) } }
            _ = try? backend.mode(.common).schedule(.every(.milliseconds(10))) { tick in counts.withLock { $0.commonTicks.append(tick) } }

            // "Scrolling": the loop runs in the tracking mode for 150 ms.
            _ = RunLoop.current.run(mode: Self.tracking, before: Date(timeIntervalSinceNow: 0.15))
            duringTracking.withLock { $0 = counts.current }
            // Back to the default mode for 60 ms.
            _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.06))
        }
        let tracked = duringTracking.current
        #expect(tracked.defaultTicks.isEmpty, "a default-mode timer must wait while the loop tracks")
        #expect(tracked.commonTicks.count >= 5, "a common-mode timer keeps firing while the loop tracks")
        let after = counts.current
        let firstDefault = try #require(after.defaultTicks.first)
        // The ~14 ticks that came due while tracking are skipped: one late fire, then on time.
        #expect(firstDefault.missed >= 5)
        #expect(firstDefault.lateness >= .milliseconds(0))
        #expect(after.defaultTicks.count >= 2)
        #expect(after.defaultTicks.count < 14, "missed ticks are not burst out under .skip")
    }

    @Test func aCustomModeTimerFiresOnlyInItsMode() throws {
        let fired = Locked(0)
        let inDefault = Locked(0)
        let registry = TimerRegistry()
        try onRunLoopThread {
            let backend = RunLoopBackend(attachedTo: .current, registry: registry)
            defer { backend.shutdown() }
            _ = try? backend.mode(Self.tracking).schedule(.every(.milliseconds(5))) { _ in fired.withLock { $0 += 1 } }
            _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.05))
            inDefault.withLock { $0 = fired.current }
            _ = RunLoop.current.run(mode: Self.tracking, before: Date(timeIntervalSinceNow: 0.05))
        }
        #expect(inDefault.current == 0)
        #expect(fired.current >= 2)
    }

    @Test func modeTimersShareTheRegistryAndNameTheirMode() throws {
        let registry = TimerRegistry()
        let backend = try RunLoopBackend(registry: registry)
        defer { backend.shutdown() }
        try backend.schedule(.after(.seconds(60)), name: "a") { _ in }
        try backend.mode(.common).schedule(.after(.seconds(60)), name: "b") { _ in }
        #expect(throws: TimerError.duplicateName("a")) { try backend.mode(.common).schedule(.after(.seconds(1)), name: "a") { _ in } }
        #expect(registry.snapshot().map(\.backend) == ["runloop", "runloop[kCFRunLoopCommonModes]"])
        backend.shutdown()
        #expect(registry.count == 0, "shutdown ends the timers of every mode")
        #expect(throws: TimerError.self) { try backend.mode(.default).schedule(.after(.seconds(1))) { _ in } }
    }
}
