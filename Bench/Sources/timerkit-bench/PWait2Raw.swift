import CBenchSystem
import Foundation
import Synchronization
import TimerKit

/// The fan-out as an epoll_pwait2 program without TimerKit writes it, with TimerKit's design:
/// the timers' deadlines in a binary min-heap in user space, and one `epoll_pwait2` per wake-up
/// whose timeout is the earliest deadline (no timerfd, a timer slack of 1 ns). A fired timer's
/// next deadline on the grid replaces it at the top and sinks. The floor of TimerKit's
/// `epoll-pwait2` mode: what the wait itself costs, with the least user-space work beside it.
///
/// `timerfd-raw` is the same loop waking through a timerfd, as TimerKit's epoll backend does in
/// its default mode: per wake-up one `timerfd_settime` to the earliest deadline and one blocking
/// `read` of the timerfd (a read, not an epoll wait: the least a timerfd wake-up costs).
enum PWait2RawFanout {
    static let name = "pwait2-raw"
    static let timerfdName = "timerfd-raw"

    /// How the loop waits for the earliest deadline.
    enum Wait {
        /// `epoll_pwait2` on an empty epoll set, with the deadline as its timeout.
        case pwait2(epollFD: Int32)
        /// A `CLOCK_MONOTONIC` timerfd set to the deadline, then read.
        case timerfd(Int32)
    }

    /// The heap and the stop flag; everything but `stop` is touched by the loop thread only.
    private final class Loop: @unchecked Sendable {
        // @unchecked: `grid` and `heap` are touched by the loop thread only, between its start
        // and its end; `stop` is atomic.
        var grid: RawFanoutGrid
        /// Timer indices, in heap order of their deadlines.
        var heap: [Int32]
        let stop = Atomic<Bool>(false)

        init(grid: RawFanoutGrid) {
            self.grid = grid
            let deadlines = grid.deadlines
            heap = deadlines.indices.sorted { deadlines[$0] < deadlines[$1] }.map { Int32($0) }
        }

        /// Lets the top entry sink to its place after its deadline moved later.
        func siftDownTop() {
            let count = heap.count
            let moving = heap[0]
            let key = grid.deadlines[Int(moving)]
            var index = 0
            while true {
                var child = 2 * index + 1
                guard child < count else { break }
                if child + 1 < count, grid.deadlines[Int(heap[child + 1])] < grid.deadlines[Int(heap[child])] { child += 1 }
                guard grid.deadlines[Int(heap[child])] < key else { break }
                heap[index] = heap[child]
                index = child
            }
            heap[index] = moving
        }

        func run(_ wait: Wait) -> Int32 {
            while !stop.load(ordering: .relaxed) {
                var now = MonotonicInstant.now().nanoseconds
                while let top = heap.first, grid.deadlines[Int(top)] <= now {
                    grid.fire(Int(top), at: now)
                    siftDownTop()
                    now = MonotonicInstant.now().nanoseconds
                }
                guard let top = heap.first else { return 0 }
                let deadline = grid.deadlines[Int(top)]
                switch wait {
                case .pwait2(let epollFD):
                    let left = deadline - now
                    var timeout = timespec(tv_sec: Int(left / 1_000_000_000), tv_nsec: Int(left % 1_000_000_000))
                    let result = bench_epoll_pwait2(epollFD, &timeout)
                    if result < 0 && result != -EINTR { return -result }
                case .timerfd(let timerFD):
                    var setting = itimerspec()
                    setting.it_value = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
                    guard timerfd_settime(timerFD, Int32(TFD_TIMER_ABSTIME), &setting, nil) == 0 else { return errno }
                    var expirations: UInt64 = 0
                    if read(timerFD, &expirations, 8) < 0 && errno != EINTR { return errno }
                }
            }
            return 0
        }
    }

    /// Runs the loop waiting in `epoll_pwait2`, or through a timerfd with `timerfd: true`.
    static func run(timers: Int, period: UInt64, seconds: Double, timerfd: Bool = false, into tally: FanoutTally) throws {
        let descriptor = timerfd ? timerfd_create(CLOCK_MONOTONIC, Int32(TFD_CLOEXEC)) : epoll_create1(Int32(EPOLL_CLOEXEC))
        guard descriptor >= 0 else { throw TimerError.systemCall(call: timerfd ? "timerfd_create" : "epoll_create1", errno: errno) }
        defer { close(descriptor) }
        let wait = timerfd ? Wait.timerfd(descriptor) : .pwait2(epollFD: descriptor)
        let loop = Loop(grid: RawFanoutGrid(timers: timers, period: period, recorder: tally.recorder))
        let ended = DispatchSemaphore(value: 0)
        let failure = Atomic<Int32>(0)
        Thread.detachNewThread {
            // As TimerKit's epoll-pwait2 mode: the default 50 µs slack would delay every wait
            // (a timerfd has none).
            _ = bench_set_timer_slack(1)
            failure.store(loop.run(wait), ordering: .relaxed)
            ended.signal()
        }
        // A timer is due every 10 µs or so: the loop sees the flag at once.
        measureFanoutSlice(seconds: seconds, into: tally) {
            loop.stop.store(true, ordering: .relaxed)
            ended.wait()
        }
        let code = failure.load(ordering: .relaxed)
        if code != 0 { throw TimerError.systemCall(call: timerfd ? "timerfd_settime or read" : "epoll_pwait2", errno: code) }
    }
}
