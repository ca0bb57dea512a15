import CLibevent
import Foundation
import Testing
import TimerKit
import TimerKitEpoll
import TimerKitLibevent
import TimerKitTestSupport
import TimerKitURing

/// `TimerBackend.name`'s documentation lists each backend's name: each is the name that backend
/// gives, and its timers' handles and snapshots give the same. (NIOBackend's, "nio", is checked
/// in TimerKitNIOTests, where the trait NIO builds it.)
@Suite("Backend names")
struct BackendNameTests {
    /// The name `backend` gives, once its timer's handle and snapshot were seen to give the same;
    /// then shuts it down.
    static func name(of backend: any TimerBackend) throws -> String {
        defer { backend.shutdown() }
        let timer = try backend.schedule(.after(.seconds(3600)), name: "named") { _ in }
        #expect(timer.backendName == backend.name)
        #expect(try backend.registry.snapshot(named: "named").backend == backend.name)
        return backend.name
    }

    /// The name of a backend that may not run on this machine (it throws `unavailable`, which
    /// names it too).
    static func nameOrUnavailable(_ make: () throws(TimerError) -> any TimerBackend) throws -> String {
        let backend: any TimerBackend
        do throws(TimerError) {
            backend = try make()
        } catch {
            guard case .unavailable(let name, _) = error else { throw error }
            return name
        }
        return try name(of: backend)
    }

    @Test func eachBackendGivesTheNameItsDocumentationLists() throws {
        #expect(try Self.name(of: EpollBackend(registry: TimerRegistry())) == "epoll")
        let pwait2 = try Self.nameOrUnavailable { () throws(TimerError) in
            try EpollBackend(options: .init(waitMode: .epollPwait2), registry: TimerRegistry())
        }
        #expect(pwait2 == "epoll")
        #expect(try Self.nameOrUnavailable { () throws(TimerError) in try IOURingBackend(registry: TimerRegistry()) } == "io_uring")
        #expect(try Self.name(of: LibeventBackend(registry: TimerRegistry())) == "libevent")
        let base = try #require(event_base_new())
        #expect(try Self.name(of: LibeventBackend(attachedTo: base, registry: TimerRegistry())) == "libevent-attached")
        event_base_free(base)
        #expect(try Self.name(of: DispatchBackend(registry: TimerRegistry())) == "dispatch")
        let runLoop = try RunLoopBackend(registry: TimerRegistry())
        #expect(try Self.name(of: runLoop.mode(.common)) == "runloop[kCFRunLoopCommonModes]")
        #expect(try Self.name(of: runLoop.mode(RunLoop.Mode("tracking"))) == "runloop[tracking]")
        #expect(try Self.name(of: runLoop) == "runloop")
        let attached = Locked<String?>(nil)
        onNewThread {
            attached.withLock { $0 = try? Self.name(of: RunLoopBackend(attachedTo: .current, registry: TimerRegistry())) }
        }
        #expect(attached.current == "runloop")
        #expect(try Self.name(of: ManualBackend(registry: TimerRegistry())) == "manual")
        #expect(try Self.name(of: ManualBackend(registry: TimerRegistry(), name: "manual-b")) == "manual-b")
        #expect(try Self.name(of: DisplaySource(registry: TimerRegistry())) == "display@60Hz")
        #expect(try Self.name(of: DisplaySource(refreshRate: 120, registry: TimerRegistry())) == "display@120Hz")
    }
}
