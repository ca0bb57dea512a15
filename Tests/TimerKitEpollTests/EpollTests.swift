import CTimerShims
import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitEpoll
import TimerKitTestSupport

@Suite("Epoll backend")
struct EpollTests {
    /// With room for 0, 1 and 2 of the 3 descriptors the backend needs, each attempt is a
    /// typed error naming the call that failed, and leaves no descriptor behind.
    @Test(arguments: [(0, "epoll_create1"), (1, "timerfd_create"), (2, "eventfd")])
    func runningOutOfDescriptorsIsATypedErrorAndLeaksNothing(_ room: Int, _ failingCall: String) async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) { [room, failingCall] in
            reportWithRoomForDescriptors(room) {
                do throws(TimerError) {
                    _ = try EpollBackend(registry: TimerRegistry())
                    return 10  // should have thrown
                } catch .systemCall(let call, let code) where call == failingCall && code == EMFILE {
                    return 0
                } catch {
                    return 20
                }
            }
            exit(0)
        }
        expectOutcome(result)
    }

    @Test func theLoopSleepsWhileNothingIsDue() throws {
        let backend = try EpollBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        try backend.schedule(.after(.seconds(3600))) { _ in }
        let before = try #require(voluntarySwitches(threadID: backend.loopThreadID))
        blockRealTime(.milliseconds(300))
        let after = try #require(voluntarySwitches(threadID: backend.loopThreadID))
        // Scheduling arms the timerfd from this thread: the loop does not even wake for it.
        #expect(after - before <= 1)
    }

    @Test func handlersRunOnTheLoopThread() throws {
        let backend = try EpollBackend(options: .init(threadName: "tk-test-loop"), registry: TimerRegistry())
        defer { backend.shutdown() }
        let seen = Locked<Int32>(0)
        let done = DispatchSemaphore(value: 0)
        try backend.schedule(.after(.milliseconds(1))) { _ in
            seen.withLock { $0 = ctk_gettid() }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + .seconds(10)) == .success)
        #expect(seen.current == backend.loopThreadID)
    }

    @Test func priorityIsGrantedOrTheFallbackIsReported() throws {
        let backend = try EpollBackend(options: .init(priority: .realtime(10), timerSlack: .nanoseconds(1)), registry: TimerRegistry())
        defer { backend.shutdown() }
        let got = backend.obtainedPriority
        if got.priority == .realtime(10) {
            #expect(got.fallbackReason == nil)
            #expect(got.description == "SCHED_FIFO 10")
        } else {
            #expect(got.fallbackReason?.contains("SCHED_FIFO") == true, "a fallback says why: \(got)")
        }
    }

    @Test(arguments: [
        (ThreadPriority.realtime(0), "realtime priority"), (.realtime(100), "realtime priority"),
        (.nice(-21), "nice"), (.nice(20), "nice"),
    ])
    func outOfRangePrioritiesAreRefused(_ priority: ThreadPriority, _ name: String) {
        let error = #expect(throws: TimerError.self) { try EpollBackend(options: .init(priority: priority), registry: TimerRegistry()) }
        guard case let .invalidOption(option, _, _) = error else {
            Issue.record("expected invalidOption, got \(String(describing: error))")
            return
        }
        #expect(option == name)
    }

    @Test func aNegativeTimerSlackIsRefused() {
        #expect(throws: TimerError.negativeDuration(parameter: "timerSlack", value: .milliseconds(-1))) {
            try EpollBackend(options: .init(timerSlack: .milliseconds(-1)), registry: TimerRegistry())
        }
    }

    @Test func schedulingFromOtherThreadsWakesTheLoopForAnEarlierDeadline() throws {
        let backend = try EpollBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        try backend.schedule(.after(.seconds(3600))) { _ in }
        let fired = DispatchSemaphore(value: 0)
        onBackgroundThread {
            _ = try? backend.schedule(.after(.milliseconds(5))) { _ in fired.signal() }
        }
        #expect(fired.wait(timeout: .now() + .seconds(10)) == .success)
    }
}
