import NIOCore
import NIOEmbedded
import NIOPosix
import Testing
import TimerKit
import TimerKitNIO
import TimerKitTestSupport

@Suite("TimerKitNIO")
struct NIOBackendTests {
    @Test func nioDeadlinesAndMonotonicInstantsCountTheSameClock() {
        let before = MonotonicInstant.now()
        let deadline = NIODeadline.now()
        let after = MonotonicInstant.now()
        #expect(MonotonicInstant(deadline) >= before)
        #expect(MonotonicInstant(deadline) <= after)
        #expect(NIODeadline(before) == .uptimeNanoseconds(before.nanoseconds))
        #expect(NIODeadline(MonotonicInstant.distantFuture) == .distantFuture)
        #expect(MonotonicInstant(NIODeadline(before)) == before)
    }
}

extension NIOBackendTests {
    /// How a NIO user tests timer code: on an `EmbeddedEventLoop` the backend reads the loop's
    /// virtual time, and `advanceTime(by:)` fires what came due, synchronously, in order.
    @Test func onAnEmbeddedLoopTimersFollowTheLoopsVirtualTime() throws {
        try withWatchdog {
            let loop = EmbeddedEventLoop()
            let backend = NIOBackend(on: loop, registry: TimerRegistry())
            defer { backend.shutdown() }
            let fired = Locked<[Int]>([])
            let timer = try backend.schedule(.every(.seconds(1), count: 3), name: "heartbeat") { tick in
                fired.withLock { $0.append(tick.index) }
            }
            loop.advanceTime(by: .milliseconds(999))
            #expect(fired.current == [])
            loop.advanceTime(by: .milliseconds(1))
            #expect(fired.current == [0])
            loop.advanceTime(by: .seconds(5))
            #expect(fired.current == [0, 1, 2])
            #expect(timer.currentState == .finished)
            #expect(backend.registry.snapshot().isEmpty)
        }
    }

    /// A connected `EmbeddedChannel` with a 30 s `IdleTimeoutHandler` on a backend of its loop.
    private func connectionWithIdleTimeout() throws -> (EmbeddedChannel, NIOBackend) {
        let channel = EmbeddedChannel()
        let backend = NIOBackend(on: channel.embeddedEventLoop, registry: TimerRegistry())
        try channel.pipeline.syncOperations.addHandler(IdleTimeoutHandler(timers: backend, timeout: .seconds(30)))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 7)).wait()
        return (channel, backend)
    }

    @Test func anIdleConnectionIsClosedAndABusyOneIsNot() throws {
        try withWatchdog {
            let (channel, backend) = try connectionWithIdleTimeout()
            defer { backend.shutdown() }
            #expect(channel.isActive)
            #expect(backend.registry.snapshot().count == 1)
            for _ in 0..<3 {
                channel.embeddedEventLoop.advanceTime(by: .seconds(20))
                try channel.writeInbound(ByteBuffer(string: "ping"))
                _ = try channel.readInbound(as: ByteBuffer.self)
            }
            #expect(channel.isActive)  // 60 s in all, but never 30 s of silence
            channel.embeddedEventLoop.advanceTime(by: .seconds(30))
            #expect(!channel.isActive)
            #expect(backend.registry.snapshot().isEmpty)
        }
    }

    @Test func closingTheConnectionCancelsItsTimer() throws {
        try withWatchdog {
            let (channel, backend) = try connectionWithIdleTimeout()
            defer { backend.shutdown() }
            #expect(backend.registry.snapshot().count == 1)
            _ = try channel.finish()
            #expect(backend.registry.snapshot().isEmpty)
        }
    }

    /// The same on `NIOAsyncTestingEventLoop`, the async tests' loop: `await advanceTime(by:)`.
    @Test func onAnAsyncTestingLoopTimersFollowTheLoopsVirtualTime() async throws {
        try await withWatchdog {
            let loop = NIOAsyncTestingEventLoop()
            let backend = NIOBackend(on: loop, registry: TimerRegistry())
            let fired = Locked<[Int]>([])
            try backend.schedule(.every(.seconds(1), count: 2)) { tick in fired.withLock { $0.append(tick.index) } }
            await loop.advanceTime(by: .milliseconds(999))
            #expect(fired.current == [])
            await loop.advanceTime(by: .seconds(2))
            #expect(fired.current == [0, 1])
            backend.shutdown()
            await loop.shutdownGracefully()
        }
    }
}
