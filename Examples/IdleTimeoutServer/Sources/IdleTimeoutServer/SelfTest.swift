import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// Connections to the server on 127.0.0.1 only, a fixed number, for a bounded time: three that
/// send a request every fifth of the idle timeout, three that send one request and fall silent.
struct SelfTest {
    let port: Int
    let idle: Duration
    let talking = 3
    let silent = 3

    /// One connection's story, as the client saw it.
    struct Connection: Sendable {
        let index: Int
        let talks: Bool
        var lastRequest = ContinuousClock.now
        var closedAt: ContinuousClock.Instant?
    }

    func run() throws -> Bool {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        let bootstrap = ClientBootstrap(group: group)
        let request = ByteBuffer(string: "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        let connections = Connections()
        var channels: [any Channel] = []
        for index in 0..<(talking + silent) {
            let talks = index < talking
            let channel = try bootstrap.connect(host: "127.0.0.1", port: port).wait()
            connections.list.withLock { $0.append(Connection(index: index, talks: talks)) }
            channel.closeFuture.whenComplete { _ in
                connections.list.withLock { $0[index].closedAt = .now }
            }
            // Stamped before the write: the server reads the request after it.
            connections.list.withLock { $0[index].lastRequest = .now }
            try channel.writeAndFlush(request).wait()
            if talks {
                let every = TimeAmount(idle / 5)
                channel.eventLoop.scheduleRepeatedTask(initialDelay: every, delay: every) { _ in
                    connections.list.withLock { $0[index].lastRequest = .now }
                    channel.writeAndFlush(request, promise: nil)
                }
            }
            channels.append(channel)
        }
        // Long enough for every silent connection to be closed, with 2 s to spare, and for
        // the talking ones to have outlived the idle timeout more than twice over.
        let started = ContinuousClock.now
        while ContinuousClock.now < started + idle * 2 + .seconds(1) {
            Thread.sleep(forTimeInterval: 0.05)
        }
        let seen = connections.list.withLock { $0 }
        for channel in channels { try? channel.close().wait() }

        var passed = true
        for connection in seen {
            let kind = connection.talks ? "talking" : "silent "
            guard let closedAt = connection.closedAt else {
                print("connection \(connection.index) (\(kind)): open after \(seconds(ContinuousClock.now - started))")
                if !connection.talks { passed = false }
                continue
            }
            let quiet = connection.lastRequest.duration(to: closedAt)
            print("connection \(connection.index) (\(kind)): closed \(seconds(quiet)) after its last request")
            // Closed: only a silent one may be, no sooner than the timeout, within 2 s of it.
            if connection.talks || quiet < idle || quiet > idle + .seconds(2) { passed = false }
        }
        let closed = seen.filter { $0.closedAt != nil }.count
        print(
            passed
                ? "self-test: passed: the \(silent) silent connections were closed on time, the \(talking) talking ones stayed open"
                : "self-test: FAILED: \(closed) of \(seen.count) connections were closed; expected the \(silent) silent ones, on time")
        return passed
    }

    /// What the event loops and the test's thread share.
    final class Connections: Sendable {
        let list = Mutex([Connection]())
    }

    private func seconds(_ duration: Duration) -> String {
        let (whole, attoseconds) = duration.components
        let milliseconds = whole * 1_000 + attoseconds / 1_000_000_000_000_000
        return "\(milliseconds / 1_000).\(String(format: "%03d", milliseconds % 1_000)) s"
    }
}
