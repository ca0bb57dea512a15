import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitTestSupport

// The code of the "Holding millions of timers" article, compiled and run here. Each block from
// an "article" marker comment to its "end" is one of the article's code blocks
// (DocumentationTests checks that they match).

/// A connection as a server keeps it: here, what the article's callback needs of one.
final class Connection: Sendable {
    private let closed = Locked(0)
    var closeCount: Int { closed.current }
    func close() { closed.withLock { $0 += 1 } }
}

// article: callback
/// Closes its connection when the connection's idle timeout runs out.
final class IdleCloser: TimerCallback {
    let connection: Connection
    init(_ connection: Connection) { self.connection = connection }

    func timerFired(_ fire: TimerFire) { connection.close() }
}
// end

// article: connection
/// A connection's idle timeout, kept by key: each read moves it 30 s on, and a connection that
/// closes first cancels it.
struct IdleTimeout {
    let backend: any TimerBackend
    let key: TimerKey

    init(for connection: Connection, on backend: any TimerBackend) throws {
        self.backend = backend
        key = try backend.schedule(.after(.seconds(30)), calling: IdleCloser(connection))
    }

    func connectionRead() throws { try backend.reschedule(key, .after(.seconds(30))) }

    func connectionClosed() { backend.cancel(key) }
}
// end

@Suite("The millions-of-timers article")
struct MillionsArticleTests {
    @Test func aSilentConnectionClosesAfter30SecondsAndABusyOneDoesNot() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let (silent, busy, closedFirst) = (Connection(), Connection(), Connection())
        let silentTimeout = try IdleTimeout(for: silent, on: backend)
        let busyTimeout = try IdleTimeout(for: busy, on: backend)
        let closedTimeout = try IdleTimeout(for: closedFirst, on: backend)
        closedTimeout.connectionClosed()
        for _ in 0..<5 {
            backend.advance(by: .seconds(20))
            try busyTimeout.connectionRead()
        }
        #expect(silent.closeCount == 1 && busy.closeCount == 0 && closedFirst.closeCount == 0)
        #expect(!backend.isActive(silentTimeout.key) && backend.isActive(busyTimeout.key) && !backend.isActive(closedTimeout.key))
        // An ended key answers only that it has ended.
        #expect(throws: TimerError.self) { try silentTimeout.connectionRead() }
        silentTimeout.connectionClosed()  // nothing happens
        backend.advance(by: .seconds(30))
        #expect(busy.closeCount == 1)
    }
}
