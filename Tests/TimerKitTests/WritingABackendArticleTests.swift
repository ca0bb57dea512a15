import CLibevent
import Testing
import TimerKitEpoll
import TimerKitLibevent
import TimerKitTestSupport
import TimerKitURing

@testable @_spi(BackendImplementation) import TimerKit

/// What the "Writing a backend" article says of its example backend (`PumpedBackend`, the
/// article's code, which the conformance suite runs) and of TimerKit's own backends.
@Suite("The Writing a backend article")
struct WritingABackendArticleTests {
    /// The object the scheduler of `backend` owns as its driver, if it owns one.
    static func ownedDriver(of backend: any TimerBackend) -> (any TimerDriver)? {
        backend.scheduler.mutex.withLock { backend.scheduler.ownedDriver?.takeUnretainedValue().driver }
    }

    /// The scheduler owns the driver, a small object that holds neither the backend nor the
    /// scheduler: dropped without `shutdown()`, the backend's `deinit` ends its timers (reason
    /// `backendShutDown`), the scheduler lets the driver go, and the scheduler goes with the
    /// last handle of its timers. Nothing is kept alive by a cycle.
    @Test func theExampleBackendDroppedWithoutShutdownEndsItsTimersAndIsFreed() throws {
        let registry = TimerRegistry()
        var backend: PumpedBackend? = PumpedBackend(registry: registry)
        weak let weakBackend = backend
        weak let scheduler = backend?.scheduler
        weak let driver = backend.flatMap { Self.ownedDriver(of: $0) }
        #expect(driver != nil, "the scheduler owns a driver")
        var timer: TimerHandle? = try backend?.schedule(.every(.seconds(1)), name: "left behind") { _ in }
        final class Quiet: TimerCallback {
            let ended = Locked<TimerEndReason?>(nil)
            func timerFired(_ fire: TimerFire) {}
            func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) { ended.withLock { $0 = reason } }
        }
        let callback = Quiet()
        try backend?.schedule(.after(.seconds(60)), calling: callback)
        #expect(registry.count == 2)

        backend = nil
        #expect(weakBackend == nil)
        #expect(registry.count == 0, "the timers end with the backend")
        #expect(timer?.endReason == .backendShutDown && callback.ended.current == .backendShutDown)
        #expect(driver == nil, "the scheduler let its driver go")
        #expect(scheduler != nil, "a handle of its timers holds the scheduler")
        timer = nil
        #expect(scheduler == nil, "and nothing else does")
    }

    /// TimerKit's epoll (both wait modes), io_uring, libevent (on its own thread or attached),
    /// Dispatch, RunLoop and Manual backends and its `DisplaySource` give their scheduler a
    /// driver to own (`attach(owning:)`), as the example does; none is its own driver.
    @Test func timerKitsBackendsGiveTheirSchedulerADriverToOwn() throws {
        var backends: [any TimerBackend] = [
            try EpollBackend(registry: TimerRegistry()), try LibeventBackend(registry: TimerRegistry()),
            DispatchBackend(registry: TimerRegistry()), try RunLoopBackend(registry: TimerRegistry()),
            ManualBackend(registry: TimerRegistry()), try DisplaySource(refreshRate: 60, priority: .normal, registry: TimerRegistry()),
        ]
        for kind in [BackendKind.epollPwait2, .uring] {
            if try !kind.checkedUnavailable("owning a driver") { backends.append(try kind.makeOwnLoopBackend(TimerRegistry())) }
        }
        let base = try #require(event_base_new())
        backends.append(try LibeventBackend(attachedTo: base, registry: TimerRegistry()))
        for backend in backends {
            let driver = Self.ownedDriver(of: backend)
            #expect(driver != nil, "\(backend.name)'s scheduler owns its driver")
            #expect(driver.map { $0 !== backend } ?? true, "\(backend.name) is not its own driver")
            backend.shutdown()
        }
        event_base_free(base)
    }
}
