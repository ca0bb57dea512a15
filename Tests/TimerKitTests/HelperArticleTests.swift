import Testing
import TimerKitTestSupport

@_spi(BackendImplementation) @testable import TimerKit

// The code of the "Debounce, throttle, timeouts and owned timers" article, compiled and run
// here. Each block from an "article" marker comment to its "end" is one of the article's
// code blocks (DocumentationTests checks that they match).

// article: debounce
/// Searches once the user has stopped typing for 300 ms.
func searchAsTheUserTypes(_ text: String, on backend: some TimerBackend, search: @escaping @Sendable (String) -> Void) throws {
    try backend.debounce("search", for: .milliseconds(300)) { search(text) }
}
// end

// article: throttle
/// Reports progress at most every 100 ms: at once for the first report, and the latest one
/// at the end of each window.
final class Download: Sendable {
    private let progress: Throttler
    private let report: @Sendable (Int) -> Void

    init(on backend: some TimerBackend, report: @escaping @Sendable (Int) -> Void) throws {
        progress = try Throttler(every: .milliseconds(100), edge: .both, on: backend)
        self.report = report
    }

    func received(totalBytes: Int) throws {
        try progress.call { [report] in report(totalBytes) }
    }
}
// end

// article: timeout
/// Fetches, or gives up after two seconds on `backend`'s clock.
func fetchOrGiveUp(on backend: some TimerBackend, fetch: @escaping @Sendable () async throws -> String) async throws -> String? {
    do {
        return try await withTimeout(.seconds(2), on: backend, name: "fetch") { try await fetch() }
    } catch let timeout as TimeoutError {
        print(timeout)  // timer 'fetch' on epoll ran out: the operation did not finish within 2.0 seconds
        return nil
    }
}
// end

// article: jitter
/// Polls every 30 s; a fleet of clients started together spreads its polls over 5 s.
func startPolling(on backend: some TimerBackend, poll: @escaping @Sendable () -> Void) throws -> TimerHandle {
    try backend.schedule(.every(.seconds(30), jitter: .seconds(5))) { _ in poll() }
}
// end

// article: ended
/// A reminder that logs why it was not sent, if it was not: one place to learn how it ended.
func scheduleReminder(
    on backend: some TimerBackend, send: @escaping @Sendable () -> Void, log: @escaping @Sendable (String) -> Void
) throws {
    let reminder = try backend.schedule(.after(.seconds(60)), name: "reminder") { _ in send() }
    reminder.onEnd { reason in
        if reason != .completed { log("reminder not sent: \(reason)") }
    }
}
// end

// article: owned
final class Poller {
    private var refresh: OwnedTimer?

    func start(on backend: some TimerBackend, poll: @escaping @Sendable () -> Void) throws {
        refresh = try OwnedTimer(backend.schedule(.every(.seconds(5))) { _ in poll() })
    }
    // No deinit, no stop(): releasing the poller cancels its timer.
}
// end

// article: cap
/// A session store that refuses new sessions rather than grow without bound.
func startSession(_ id: String, on backend: some TimerBackend, expire: @escaping @Sendable () -> Void) throws -> Bool {
    do {
        try backend.schedule(.after(.seconds(1800)), name: "session \(id)") { _ in expire() }
        return true
    } catch .liveTimerLimit(let scope, let limit) {
        print("\(scope): \(limit) sessions already")
        return false
    }
}
// end

@Suite("The helpers article's examples")
struct HelperArticleTests {
    @Test func theSearchRunsOnceForTheLastText() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let searches = Locked<[String]>([])
        for text in ["s", "sw", "swift"] {
            try searchAsTheUserTypes(text, on: clock) { query in searches.withLock { $0.append(query) } }
            clock.advance(by: .milliseconds(100))
        }
        clock.advance(by: .milliseconds(200))
        #expect(searches.current == ["swift"])
    }

    @Test func progressIsReportedAtMostEvery100Milliseconds() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let reports = Locked<[Int]>([])
        let download = try Download(on: clock) { bytes in reports.withLock { $0.append(bytes) } }
        for k in 1...25 {
            try download.received(totalBytes: k * 1_000)
            clock.advance(by: .milliseconds(10))
        }
        clock.advance(by: .seconds(1))
        #expect(reports.current == [1_000, 10_000, 20_000, 25_000])
    }

    @Test func aFetchThatTakesTooLongGivesUp() async throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let slow = Task(executorPreference: clock.taskExecutor) {
            try await fetchOrGiveUp(on: clock) {
                try await clock.clock.sleep(for: .seconds(5))
                return "late"
            }
        }
        await clock.advanceAndSettle(by: .seconds(2))
        #expect(try await slow.value == nil)
        let quick = Task(executorPreference: clock.taskExecutor) { try await fetchOrGiveUp(on: clock) { "reply" } }
        #expect(try await quick.value == "reply")
    }

    @Test func pollsAreSpreadOverTheJitter() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let start = clock.now()
        let polled = Locked<[MonotonicInstant]>([])
        for _ in 0..<100 { _ = try startPolling(on: clock) { polled.withLock { $0.append(clock.now()) } } }
        for _ in 0..<35 { clock.advance(by: .seconds(1)) }
        #expect(polled.current.count == 100)
        #expect(polled.current.allSatisfy { $0 >= start + .seconds(30) && $0 <= start + .seconds(35) })
        #expect(Set(polled.current).count > 3, "spread over the 5 s, not all at 30 s")
    }

    @Test func aReminderLogsWhyItWasNotSent() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let logged = Locked<[String]>([])
        let log: @Sendable (String) -> Void = { line in logged.withLock { $0.append(line) } }
        try scheduleReminder(on: clock, send: {}, log: log)
        try clock.registry.cancel(named: "reminder")
        try scheduleReminder(on: clock, send: {}, log: log)
        clock.advance(by: .seconds(60))
        #expect(logged.current == ["reminder not sent: cancelled by name"])
    }

    @Test func aPollerStopsPollingWhenReleased() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let polls = Counter()
        var poller: Poller? = Poller()
        try poller?.start(on: clock) { polls.increment() }
        clock.advance(by: .seconds(10))
        poller = nil
        clock.advance(by: .seconds(10))
        #expect(polls.current == 2)
        #expect(clock.registry.count == 0)
        withExtendedLifetime(poller) {}
    }

    @Test func sessionsPastTheCapAreRefused() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        try clock.limitLiveTimers(to: 2)
        #expect(try startSession("a", on: clock) {})
        #expect(try startSession("b", on: clock) {})
        #expect(try !startSession("c", on: clock) {})
    }
}
