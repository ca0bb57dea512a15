import CLibevent
import Foundation
import Testing
@testable import TimerKit
import TimerKitLibevent

/// Descriptors of the kinds libevent opens (epoll instances, eventfds, pipes).
func eventDescriptorCount() -> Int {
    let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return fds.filter { fd in
        let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")) ?? ""
        return target.hasPrefix("anon_inode:") || target.hasPrefix("pipe:")
    }.count
}

@Suite("Libevent backend")
struct LibeventTests {
    @Test func anOwnedBaseUsesPreciseTimersAndAKernelMethod() throws {
        let backend = try LibeventBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        #expect(!backend.isAttached)
        #expect(["epoll", "poll", "select"].contains(backend.method))
    }

    @Test func aBaseThatCannotBeMadeIsATypedError() {
        #expect(throws: TimerError.nativeFailure(backend: "libevent", call: "event_base_new_with_config")) {
            try LibeventBackend(options: .init(avoidMethods: ["epoll", "poll", "select"]), registry: TimerRegistry())
        }
    }

    @Test func creatingAndShuttingDownAThousandBackendsLeaksNoDescriptor() async {
        await #expect(processExitsWith: .success) {
            // One round first, so process-wide descriptors made lazily exist before counting.
            try LibeventBackend(registry: TimerRegistry()).shutdown()
            let before = eventDescriptorCount()
            for _ in 0..<1000 {
                let backend = try LibeventBackend(registry: TimerRegistry())
                try backend.schedule(.after(.seconds(60))) { _ in }
                backend.shutdown()
            }
            // A leak would add at least 1,000. The slack of 2 absorbs libdispatch opening its
            // own epoll/eventfd pair lazily while the test machinery runs in this process.
            exit(eventDescriptorCount() - before <= 2 ? 0 : 1)
        }
    }

    @Test func anAttachedBackendRunsHandlersOnTheCallersLoopThread() throws {
        evthread_use_pthreads()
        let base = try #require(event_base_new())
        let callerThread = Locked<UInt>(0)
        let handlerThread = Locked<UInt>(0)
        let fired = DispatchSemaphore(value: 0)
        let address = UInt(bitPattern: base)
        let loop = try LoopThread {
            guard let base = OpaquePointer(bitPattern: address) else { return }
            callerThread.withLock { $0 = UInt(pthread_self()) }
            event_base_loop(base, Int32(EVLOOP_NO_EXIT_ON_EMPTY))
        }
        let backend = try LibeventBackend(attachedTo: base, registry: TimerRegistry())
        #expect(backend.isAttached)
        try backend.schedule(.after(.milliseconds(2))) { _ in
            handlerThread.withLock { $0 = UInt(pthread_self()) }
            fired.signal()
        }
        #expect(fired.wait(timeout: .now() + .seconds(10)) == .success)
        #expect(handlerThread.current == callerThread.current)
        backend.shutdown()
        // The caller stops its own loop; a break from its own thread cannot be lost.
        event_base_once(base, -1, Int16(EV_TIMEOUT), { _, _, argument in
            if let base = OpaquePointer(argument) { event_base_loopbreak(base) }
        }, UnsafeMutableRawPointer(base), nil)
        loop.join()
        event_base_free(base)
    }

    @Test func aHandlerCanShutItsOwnBackendDown() throws {
        let backend = try LibeventBackend(registry: TimerRegistry())
        let done = DispatchSemaphore(value: 0)
        try backend.schedule(.after(.milliseconds(1))) { _ in
            backend.shutdown()
            done.signal()
        }
        #expect(done.wait(timeout: .now() + .seconds(10)) == .success)
        #expect(throws: TimerError.backendShutDown(backend: "libevent")) { try backend.schedule(.after(.seconds(1))) { _ in } }
    }

    @Test func repeatsStayOnTheGridAfterALateFire() throws {
        // libevent's own EV_PERSIST restarts its period from the late fire; the core does not.
        let backend = try LibeventBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let ticks = Locked<[Tick]>([])
        let done = DispatchSemaphore(value: 0)
        try backend.schedule(.every(.milliseconds(10), count: 6), missedTicks: .burst) { tick in
            ticks.withLock { $0.append(tick) }
            if tick.index == 1 { _ = DispatchSemaphore(value: 0).wait(timeout: .now() + .milliseconds(25)) }
            if tick.index == 5 { done.signal() }
        }
        #expect(done.wait(timeout: .now() + .seconds(10)) == .success)
        let scheduled = ticks.current.map(\.scheduled)
        for (k, deadline) in scheduled.enumerated() {
            #expect(deadline == scheduled[0] + .milliseconds(10) * k)
        }
    }
}
