#if NIO
    import NIOEmbedded
    import Testing
    import TimerKit
    import TimerKitNIO

    /// `TimerBackend.name`'s documentation gives NIOBackend's name, "nio" (the other backends'
    /// names are checked in TimerKitTests' BackendNameTests): the backend gives it, and so do its
    /// timers' handles and snapshots.
    @Suite("NIOBackend's name")
    struct NIOBackendNameTests {
        @Test func itIsNio() throws {
            let backend = NIOBackend(on: EmbeddedEventLoop(), registry: TimerRegistry())
            defer { backend.shutdown() }
            let timer = try backend.schedule(.after(.seconds(3600)), name: "named") { _ in }
            #expect(backend.name == "nio")
            #expect(timer.backendName == "nio")
            #expect(try backend.registry.snapshot(named: "named").backend == "nio")
        }
    }
#endif
