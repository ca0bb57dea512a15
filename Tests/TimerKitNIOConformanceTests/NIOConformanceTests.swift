#if NIO
    import NIOCore
    import NIOPosix
    import Testing
    import TimerKit
    import TimerKitConformance
    import TimerKitNIO

    extension BackendUnderTest {
        /// A one-thread `MultiThreadedEventLoopGroup`, as a NIO server runs one per core: the code
        /// that owns the backend runs on the loop, and the group shuts down after the backend.
        static let nio = BackendUnderTest("nio") { registry in
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            let loop = group.next()
            return .init(
                NIOBackend(on: loop, registry: registry), callerContext: { loop.execute($0) },
                teardown: { try? group.syncShutdownGracefully() })
        }
    }

    /// Every check of TimerKit's backend contract on a SwiftNIO event loop, through the
    /// TimerKitConformance product, as any backend's test target runs it.
    @Test(arguments: ConformanceCheck.all)
    func nioMeetsTheBackendContract(_ check: ConformanceCheck) async throws {
        try await check.run(on: .nio)
    }

    /// Every check again with the timers kept as timers scheduled with a key
    /// (`BackendUnderTest.throughKeys`): the key path under the whole contract on a NIO loop.
    @Test(arguments: ConformanceCheck.all)
    func nioMeetsTheBackendContractThroughKeys(_ check: ConformanceCheck) async throws {
        try await check.run(on: BackendUnderTest.nio.throughKeys)
    }
#endif
