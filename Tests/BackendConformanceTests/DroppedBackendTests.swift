import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll
import TimerKitLibevent
import TimerKitTestSupport

/// Promise (README, "Never hangs, never spins"): dropping a backend without shutting it down,
/// even while it fires, is safe: its timers end, its scheduler is freed, and nothing hangs or
/// crashes, whichever thread lets the last reference go (the scheduler loads its driver only into what it releases
/// after unlocking, so a backend's `deinit` never runs under its lock).
@Suite("Backends dropped without shutdown", .onAThreadOfItsOwn)
struct DroppedBackendTests {
    @Test(arguments: ["dispatch", "epoll", "epollPwait2", "libevent", "runLoop", "uring"])
    func aBusyBackendDroppedWithoutShutdownEndsItsTimers(_ kind: String) throws {
        if let own = BackendKind(rawValue: kind), try own.checkedUnavailable("dropping a busy backend") { return }
        try withWatchdog {
            for _ in 0..<20 {
                let registry = TimerRegistry()
                var backend: (any TimerBackend)? = try Self.make(kind, registry)
                let fired = Locked(0)
                try backend?.schedule(.every(.microseconds(20))) { _ in fired.withLock { $0 += 1 } }
                #expect(waitFor { fired.current >= 10 })
                weak let scheduler = backend?.scheduler
                backend = nil
                #expect(waitFor { registry.count == 0 }, "its timer ends with it")
                // Whatever held the scheduler for its loop (a GCD handler, a CF timer's context, a
                // loop thread) lets go of it on this exit too; so do the registry and the clock
                // watcher, which hold it only while it has live timers.
                #expect(waitFor { scheduler == nil }, "its scheduler goes with it")
                let after = fired.current
                blockRealTime(.milliseconds(5))
                #expect(fired.current == after, "no handler runs once it has gone")
            }
        }
    }

    private static func make(_ kind: String, _ registry: TimerRegistry) throws -> any TimerBackend {
        switch kind {
        case "epoll": try EpollBackend(registry: registry)
        case "epollPwait2": try BackendKind.epollPwait2.makeOwnLoopBackend(registry)
        case "uring": try BackendKind.uring.makeOwnLoopBackend(registry)
        case "libevent": try LibeventBackend(registry: registry)
        case "runLoop": try RunLoopBackend(registry: registry)
        default: DispatchBackend(registry: registry)
        }
    }
}
