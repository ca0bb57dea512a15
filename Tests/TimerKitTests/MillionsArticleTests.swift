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

    /// "A backend takes at most 255 distinct callback types; the next one is refused with
    /// `TimerError.invalidOption`": 255 types schedule, the 256th is refused and leaves no timer
    /// behind, and the types already taken still schedule (each type's kind is found again).
    @Test func aBackendTakes255CallbackTypesAndRefusesTheNext() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let fires = Locked(0)
        var calls: [() throws -> TimerKey] = []
        addCallbackTypes(Leaf.self, count: 256, firesInto: fires, on: backend, into: &calls)
        let keys = try calls.prefix(255).map { try $0() }
        #expect(Set(keys).count == 255 && backend.statistics.liveTimers == 255)
        #expect {
            _ = try calls[255]()
        } throws: { error in
            guard case let .invalidOption(name, _, allowed) = error as? TimerError else { return false }
            return name == "callback" && allowed.contains("255")
        }
        // Refused before anything was made: no timer, and no cancel counted.
        #expect(backend.statistics.liveTimers == 255 && backend.statistics.cancels == 0)
        // Every type taken still schedules, the first and the last.
        let again = [try calls[0](), try calls[254]()]
        #expect(again.allSatisfy { backend.isActive($0) } && backend.statistics.liveTimers == 257)
        // Their timers fire through their own types.
        backend.advance(by: .seconds(61))
        #expect(fires.current == 257 && backend.statistics.liveTimers == 0)
    }
}

/// A callback type per `Tag`: nested tags (`Nest<Nest<Leaf>>`) make as many distinct types as a
/// test needs.
final class ProbeCallback<Tag>: TimerCallback {
    let fires: Locked<Int>
    init(_ fires: Locked<Int>) { self.fires = fires }
    func timerFired(_ fire: TimerFire) { fires.withLock { $0 += 1 } }
}

enum Leaf {}
enum Nest<Inner> {}

/// Appends `count` schedules, each of a callback of its own type (`ProbeCallback<Tag>`,
/// `ProbeCallback<Nest<Tag>>`, ...), 60 s away on `backend`.
private func addCallbackTypes<Tag>(
    _: Tag.Type, count: Int, firesInto fires: Locked<Int>, on backend: ManualBackend, into calls: inout [() throws -> TimerKey]
) {
    guard count > 0 else { return }
    calls.append { try backend.schedule(.after(.seconds(60)), calling: ProbeCallback<Tag>(fires)) }
    addCallbackTypes(Nest<Tag>.self, count: count - 1, firesInto: fires, on: backend, into: &calls)
}
