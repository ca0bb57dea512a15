import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll
import TimerKitLibevent
import TimerKitTestSupport
import TimerKitURing

/// Promise (`TimerBackend.unretainedScheduler`, for backend implementors): it is `scheduler`,
/// which a key's schedule, cancel and reschedule and a handler's schedule borrow without
/// retaining. Every backend here returns it from its stored `let`, and a backend that does not
/// implement it (the "Writing a backend" article's `PumpedBackend`) gets the default, which reads
/// `scheduler`. A backend that lent another object would send those calls to the wrong scheduler.
@Suite("The scheduler a backend lends unretained")
struct UnretainedSchedulerTests {
    @Test(arguments: ["manual", "dispatch", "epoll", "epollPwait2", "libevent", "runLoop", "uring", "pumped", "displaySource"])
    func itIsTheBackendsScheduler(_ kind: String) throws {
        if let own = BackendKind(rawValue: kind), try own.checkedUnavailable("lending the scheduler") { return }
        let registry = TimerRegistry()
        let backend: any TimerBackend =
            switch kind {
            case "manual": ManualBackend(registry: registry)
            case "epoll": try EpollBackend(registry: registry)
            case "epollPwait2": try BackendKind.epollPwait2.makeOwnLoopBackend(registry)
            case "uring": try BackendKind.uring.makeOwnLoopBackend(registry)
            case "libevent": try LibeventBackend(registry: registry)
            case "runLoop": try RunLoopBackend(registry: registry)
            case "pumped": PumpedBackend(registry: registry)
            case "displaySource": try DisplaySource(refreshRate: 60, priority: .normal, registry: registry)
            default: DispatchBackend(registry: registry)
            }
        defer { backend.shutdown() }
        #expect(backend.unretainedScheduler.takeUnretainedValue() === backend.scheduler)
        // And the calls that borrow it reach that scheduler: the timer is listed in its registry
        // and ends when cancelled through the key.
        final class Quiet: TimerCallback { func timerFired(_ fire: TimerFire) {} }
        let key = try backend.schedule(.after(.seconds(3600)), name: "lent", calling: Quiet())
        #expect(registry.timer(named: "lent") != nil)
        try backend.reschedule(key, .after(.seconds(7200)))
        #expect(backend.isActive(key))
        backend.cancel(key)
        #expect(!backend.isActive(key))
        #expect(registry.timer(named: "lent") == nil)
    }
}
