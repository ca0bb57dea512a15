import Testing
import TimerKit
import TimerKitEpoll
import TimerKitTestSupport

/// The README's tour, compiled and run here: the code between the markers is the README's block
/// (DocumentationTests checks that they are the same), less its imports, which are this file's.
@Suite("README")
struct ReadmeTourTests {
    /// On a thread of its own, under a watchdog. On the cooperative pool, which the suite's
    /// blocking tests can hold for seconds on a busy machine, the tour's 2 s timeout around
    /// `fetch()` ran out before the operation's task was run (one run in ten of
    /// `test-under-load`).
    @Test func theTourRuns() async throws {
        try await withWatchdog("the README tour") { () async throws in try await Self.tour() }
    }

    static func tour() async throws {
        // readme: tour
        let timers = try EpollBackend()  // or DispatchBackend(), NIOBackend(on: loop), ManualBackend() in tests

        // One-shot and repeating timers; durations are Swift `Duration`s, handlers run on the backend's loop.
        try timers.schedule(.after(.milliseconds(250))) { tick in print("once, \(tick.lateness) late") }
        let poll = try timers.schedule(.every(.seconds(1)), name: "poll") { tick in
            if tick.missed > 0 { print("skipped \(tick.missed) ticks") }
        }

        // Every timer is in a registry under a unique name: look it up and control it from any thread.
        try TimerRegistry.shared.suspend(named: "poll")
        try TimerRegistry.shared.resume(named: "poll")
        print(TimerRegistry.shared.snapshot())  // name, backend, state, fires, lateness, next deadline

        // The helpers written by hand around every timer library.
        try timers.debounce("search", for: .milliseconds(300)) { print("typing stopped") }
        let progress = try Throttler(every: .milliseconds(100), edge: .both, on: timers)
        try progress.call { print("at most every 100 ms") }
        @Sendable func fetch() async throws -> String { "reply" }  // stands for your own async work: a request, a query
        let reply = try await withTimeout(.seconds(2), on: timers, name: "fetch") { try await fetch() }

        // Swift Concurrency: the backend is a Clock, and a tick loop is a timer too.
        try await timers.clock.sleep(for: .milliseconds(10))
        for await tick in try timers.ticks(.every(.milliseconds(100), count: 3)) { print("tick \(tick.index)") }

        poll.cancel()  // idempotent; cancelAndWait() also waits for a handler already running
        timers.shutdown()
        // end
        #expect(reply == "reply")
        #expect(!poll.isActive)
        #expect(!TimerRegistry.shared.names.contains("poll") && !TimerRegistry.shared.names.contains("search"))
    }
}
