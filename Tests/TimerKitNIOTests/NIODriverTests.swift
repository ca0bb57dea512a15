#if NIO
    import Dispatch
    import NIOCore
    import NIOPosix
    import Testing
    import TimerKitConformance

    @_spi(BackendImplementation) @testable import TimerKit
    @testable import TimerKitNIO

    /// A `NIOBackend`'s scheduler owns its driver, as every TimerKit backend's does.
    @Suite("TimerKitNIO: its driver")
    struct NIODriverTests {
        /// The driver is not the backend (no weak driver is left to load): it is the backend's
        /// wake-up state, and the scheduler keeps it until the shutdown. Dropped without
        /// `shutdown()`, the backend shuts down in its `deinit`, which ends the cycle between the
        /// scheduler and the driver, and the scheduler goes.
        @Test func theSchedulerOwnsADriverThatIsNotTheBackendAndAllGoWithTheBackend() throws {
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            defer { try? group.syncShutdownGracefully() }
            weak var weakScheduler: TimerScheduler?
            weak var weakDriver: AnyObject?
            let fired = DispatchSemaphore(value: 0)
            do {
                let backend = NIOBackend(on: group.next(), registry: TimerRegistry())
                let scheduler = backend.scheduler
                weakScheduler = scheduler
                let driver = scheduler.mutex.withLock { scheduler.ownedDriver?.takeUnretainedValue().driver }
                let owned = try #require(driver)
                weakDriver = owned as AnyObject
                #expect(owned as AnyObject !== backend, "the backend is not its own driver")
                try backend.schedule(.after(.milliseconds(5))) { _ in fired.signal() }
                #expect(fired.wait(timeout: .now() + 20) == .success, "the owned driver woke the loop")
            }
            // The loop's thread holds the driver while a callback of it runs (the one that
            // fired the timer may still be returning): it goes once that is over.
            #expect(waitFor(.seconds(20)) { weakDriver == nil }, "the driver went with the shutdown of the dropped backend")
            #expect(waitFor(.seconds(20)) { weakScheduler == nil }, "the scheduler went with the backend")
        }
    }
#endif
