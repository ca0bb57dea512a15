import NIOCore
import NIOPosix
import TimerKit
import TimerKitNIO

extension BackendKind {
    /// A one-thread `MultiThreadedEventLoopGroup`, as a NIO server runs one per core: the code
    /// that owns the backend runs on the loop, and the group shuts down after the backend.
    func makeNIOHarness(registry: TimerRegistry, watchdog: Watchdog) -> Harness {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        return Harness(
            kind: self, backend: NIOBackend(on: loop, registry: registry), watchdog: watchdog,
            onCallerContext: { body in loop.execute(body) },
            teardown: { try? group.syncShutdownGracefully() })
    }
}
