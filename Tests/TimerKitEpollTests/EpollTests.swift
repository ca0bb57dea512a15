import CTimerShims
import Foundation
import Testing
import TimerKit
import TimerKitEpoll

/// Open epoll, timerfd and eventfd descriptors of this process: the kinds the backend
/// creates (other descriptors come and go with the test machinery itself).
func timerDescriptorCount() -> Int {
    let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return fds.filter { fd in
        let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")) ?? ""
        return ["anon_inode:[eventpoll]", "anon_inode:[timerfd]", "anon_inode:[eventfd]"].contains(target)
    }.count
}

/// The next `count` descriptor numbers the kernel would hand out (lowest free first).
func nextFreeDescriptors(_ count: Int) -> [Int32] {
    let probes = (0..<count).map { _ in dup(0) }
    for fd in probes { close(fd) }
    return probes
}

/// Voluntary context switches of one thread of this process: how often it went to sleep.
func voluntarySwitches(threadID: Int32) -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/self/task/\(threadID)/status", encoding: .utf8) else { return nil }
    return status.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches") }
        .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) }
}

@Suite("Epoll backend")
struct EpollTests {
    @Test func creatingAndShuttingDownAThousandBackendsLeaksNoDescriptor() async {
        // In a child process: other tests open descriptors concurrently in this one.
        await #expect(processExitsWith: .success) {
            // One round first, so process-wide descriptors made lazily exist before counting.
            try EpollBackend(registry: TimerRegistry()).shutdown()
            let before = timerDescriptorCount()
            for _ in 0..<1000 {
                let backend = try EpollBackend(registry: TimerRegistry())
                try backend.schedule(.after(.seconds(60))) { _ in }
                backend.shutdown()
            }
            // A leak would add at least 1,000. The slack of 2 absorbs libdispatch opening its
            // own epoll/eventfd pair lazily while the test machinery runs in this process.
            exit(timerDescriptorCount() - before <= 2 ? 0 : 1)
        }
    }

    @Test func runningOutOfDescriptorsIsATypedErrorAndLeaksNothing() async {
        await #expect(processExitsWith: .success) {
            let open = timerDescriptorCount()
            var limit = rlimit()
            getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
            let original = limit.rlim_cur
            // Room for 0, 1 and 2 of the 3 descriptors the backend needs: each call must fail.
            for room in 0..<3 {
                // The limit bounds descriptor numbers, so place it at the room-th free number.
                limit.rlim_cur = rlim_t(nextFreeDescriptors(3)[room])
                setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
                do {
                    _ = try EpollBackend(registry: TimerRegistry())
                    exit(10 + Int32(room))   // should have thrown
                } catch let error as TimerError {
                    guard case let .systemCall(call, errno) = error, errno == EMFILE,
                          call == ["epoll_create1", "timerfd_create", "eventfd"][room] else { exit(20 + Int32(room)) }
                } catch {
                    exit(30)
                }
                limit.rlim_cur = original
                setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
                if timerDescriptorCount() != open { exit(40 + Int32(room)) }
            }
            exit(0)
        }
    }

    @Test func theLoopSleepsWhileNothingIsDue() throws {
        let backend = try EpollBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        try backend.schedule(.after(.seconds(3600))) { _ in }
        let before = try #require(voluntarySwitches(threadID: backend.loopThreadID))
        _ = DispatchSemaphore(value: 0).wait(timeout: .now() + .milliseconds(300))
        let after = try #require(voluntarySwitches(threadID: backend.loopThreadID))
        // Scheduling the timer may wake the loop once to arm the timerfd; nothing after that.
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

    @Test func aHandlerCanShutItsOwnBackendDown() throws {
        let backend = try EpollBackend(registry: TimerRegistry())
        let done = DispatchSemaphore(value: 0)
        try backend.schedule(.after(.milliseconds(1))) { _ in
            backend.shutdown()
            done.signal()
        }
        #expect(done.wait(timeout: .now() + .seconds(10)) == .success)
        #expect(throws: TimerError.backendShutDown(backend: "epoll")) { try backend.schedule(.after(.seconds(1))) { _ in } }
    }

    @Test func schedulingFromOtherThreadsWakesTheLoopForAnEarlierDeadline() throws {
        let backend = try EpollBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        try backend.schedule(.after(.seconds(3600))) { _ in }
        let fired = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = try? backend.schedule(.after(.milliseconds(5))) { _ in fired.signal() }
        }
        #expect(fired.wait(timeout: .now() + .seconds(10)) == .success)
    }
}
