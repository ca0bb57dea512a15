import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// The seeds' ViewController: owns a repeating timer that targets itself.
final class Ticker: Sendable {
    let timer = Locked<TimerHandle?>(nil)
    let ticks = Locked(0)
    let onDeinit: @Sendable () -> Void

    init(backend: some TimerBackend, onDeinit: @escaping @Sendable () -> Void) throws {
        self.onDeinit = onDeinit
        let handle = try backend.schedule(.every(ms(10)), target: self, name: "ticker") { ticker, _ in
            ticker.ticks.withLock { $0 += 1 }
        }
        timer.withLock { $0 = handle }
    }

    deinit { onDeinit() }
}

@Suite("Weak-target proxy and observers")
struct ProxyTests {
    let registry = TimerRegistry()

    @Test func aTargetOwningItsTimerIsReleasedWhileTheTimerIsScheduled() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let deinitRan = Locked(false)
        var ticker: Ticker? = try Ticker(backend: clock) { deinitRan.withLock { $0 = true } }
        clock.advance(by: ms(30))
        #expect(ticker?.ticks.current == 3)
        let handle = try #require(ticker?.timer.current)
        ticker = nil
        #expect(deinitRan.current, "the timer must not keep its target alive")
        // The registry does not scan on every read; an explicit purge ends it at once.
        #expect(registry.cancelTimersOfReleasedTargets() == 1)
        #expect(registry.count == 0, "a dead target's timer leaves the registry")
        #expect(handle.currentState == .cancelled)
        clock.advance(by: ms(100))
        #expect(handle.fireCount == 3)
    }

    @Test func lookupsAndListingsEndTimersWhoseTargetIsGone() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        var ticker: Ticker? = try Ticker(backend: clock) {}
        let handle = try #require(ticker?.timer.current)
        ticker = nil
        #expect(registry.timer(named: "ticker") == nil, "a lookup never returns a timer whose target is gone")
        #expect(handle.currentState == .cancelled)
        #expect(registry.count == 0)
        var other: Ticker? = try Ticker(backend: clock) {}
        _ = other
        other = nil
        #expect(registry.snapshot().isEmpty)
        #expect(registry.count == 0)
    }

    @Test func aDeadTargetsTimerStopsAtItsNextTickEvenUnobserved() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        var ticker: Ticker? = try Ticker(backend: clock) {}
        let handle = try #require(ticker?.timer.current)
        ticker = nil
        clock.advance(by: ms(10))
        #expect(handle.currentState == .cancelled)
        #expect(handle.fireCount == 0)
    }

    @Test func perTimerObserversSeeEveryCallWithLateness() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let before = TickLog()
        let after = Locked<[Duration]>([])
        let order = Locked<[String]>([])
        let timer = try clock.schedule(.every(ms(10), count: 3)) { _ in order.withLock { $0.append("handler") } }
        try timer.addObserver(
            TimerObserver(
                willFire: { tick in
                    before.record(tick)
                    order.withLock { $0.append("will") }
                },
                didFire: { _, elapsed in
                    after.withLock { $0.append(elapsed) }
                    order.withLock { $0.append("did") }
                }))
        clock.advance(by: ms(50))
        #expect(before.count == 3)
        #expect(before.all.allSatisfy { $0.lateness == .zero })
        #expect(after.current.count == 3)
        #expect(order.current.prefix(3) == ["will", "handler", "did"])
    }

    @Test func registryObserversSeeEveryTimerUntilRemoved() throws {
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        let seen = Locked<[String]>([])
        let token = registry.addObserver(TimerObserver(willFire: { tick in seen.withLock { $0.append(tick.timer.name) } }))
        try clock.schedule(.after(ms(1)), name: "a") { _ in }
        try clock.schedule(.after(ms(2)), name: "b") { _ in }
        clock.advance(by: ms(5))
        registry.removeObserver(token)
        try clock.schedule(.after(ms(1)), name: "c") { _ in }
        clock.advance(by: ms(5))
        #expect(seen.current == ["a", "b"])
    }
}
