import NIOCore
import NIOHTTP1
import NIOPosix
import TimerKit
import TimerKitNIO

/// Closes a connection that has sent nothing for `timeout`: each read starts the wait again, and
/// the connection's end cancels it. It sits first in the pipeline, so any bytes count as traffic.
///
/// The timer is kept by key (`TimerKey`), the path for a timer per connection: in a release
/// build, scheduling, moving and cancelling it allocate nothing, and the key is a plain value.
final class IdleTimeoutHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    private let timers: NIOBackend  // the connection's event loop's backend
    private let timeout: Duration
    private var timer: TimerKey?

    /// What the timer calls: it closes the connection it was made for.
    private final class Closer: TimerCallback {
        let channel: any Channel
        init(_ channel: any Channel) { self.channel = channel }
        func timerFired(_ fire: TimerFire) { channel.close(promise: nil) }
    }

    init(timers: NIOBackend, timeout: Duration) {
        self.timers = timers
        self.timeout = timeout
    }

    func channelActive(context: ChannelHandlerContext) {
        timer = try? timers.schedule(.after(timeout), calling: Closer(context.channel))
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if let timer { try? timers.reschedule(timer, .after(timeout)) }  // traffic: start the wait again
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if let timer { timers.cancel(timer) }
        context.fireChannelInactive()
    }
}

/// Answers every request with "hello", keeping the connection open (HTTP/1.1 keep-alive).
final class HelloHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .end = unwrapInboundIn(data) else { return }
        var head = HTTPResponseHead(version: .http1_1, status: .ok)
        head.headers.add(name: "content-length", value: "6")
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: "hello\n")))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}

/// The HTTP server: one `NIOBackend` per event loop of its group, shared by that loop's
/// connections, so every idle timeout runs on its connection's loop.
final class Server: Sendable {
    let group: MultiThreadedEventLoopGroup
    let channel: any Channel
    private let timers: [ObjectIdentifier: NIOBackend]

    init(host: String, port: Int, idleTimeout: Duration, threads: Int) throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
        var timers: [ObjectIdentifier: NIOBackend] = [:]
        for loop in group.makeIterator() {
            timers[ObjectIdentifier(loop)] = NIOBackend(on: loop, registry: TimerRegistry())
        }
        let backends = timers
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard let loopTimers = backends[ObjectIdentifier(channel.eventLoop)] else {
                        throw ChannelError.ioOnClosedChannel
                    }
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addHandler(IdleTimeoutHandler(timers: loopTimers, timeout: idleTimeout))
                    try pipeline.configureHTTPServerPipeline()
                    try pipeline.addHandler(HelloHandler())
                }
            }
        do {
            channel = try bootstrap.bind(host: host, port: port).wait()
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
        self.group = group
        self.timers = timers
    }

    /// The port it listens on (the system's choice when asked for port 0).
    var port: Int { channel.localAddress?.port ?? 0 }

    /// Live idle timeouts: one per open connection.
    var liveTimers: Int { timers.values.reduce(0) { $0 + $1.registry.count } }

    /// Stops listening, shuts the backends down (before their loops), then the loops.
    func shutdown() throws {
        try? channel.close().wait()
        for backend in timers.values { backend.shutdown() }
        try group.syncShutdownGracefully()
    }
}
