import CBenchURing
import Foundation
import Synchronization
import TimerKit

/// The fan-out as an io_uring program without TimerKit writes it: one `IORING_OP_TIMEOUT` per
/// timer at its absolute deadline on the grid, queued again from its completion; the loop
/// thread sleeps in one `io_uring_enter` that submits the timeouts queued since and waits.
enum URingRawFanout {
    static let name = "io_uring-raw"

    /// A ring and one timespec per timer (the kernel reads each when its timeout is submitted).
    private final class Loop: @unchecked Sendable {
        // @unchecked: everything but `stop` is touched by the loop thread only, between its
        // start and its end (the ring is made there, for one issuer).
        let ring = UnsafeMutablePointer<io_uring>.allocate(capacity: 1)
        let times: UnsafeMutablePointer<__kernel_timespec>
        var grid: RawFanoutGrid
        let stop = Atomic<Bool>(false)

        init(grid: RawFanoutGrid) {
            self.grid = grid
            times = .allocate(capacity: grid.deadlines.count)
            times.initialize(repeating: __kernel_timespec(), count: grid.deadlines.count)
            ring.initialize(to: io_uring())
        }

        deinit {
            times.deallocate()
            ring.deallocate()
        }

        /// Sets the ring up on the calling thread, as TimerKit's backend does.
        func setUp() -> Int32 {
            var result: Int32 = -EINVAL
            for flags in [UInt32(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN), 0] {
                var parameters = io_uring_params()
                parameters.flags = flags
                result = io_uring_queue_init_params(4096, ring, &parameters)
                if result != -EINVAL { break }
            }
            return result
        }

        /// Queues timer `index`'s timeout at its deadline, submitting first if the queue is full.
        func queue(_ index: Int) {
            var entry = io_uring_get_sqe(ring)
            if entry == nil {
                io_uring_submit(ring)
                entry = io_uring_get_sqe(ring)
            }
            guard let entry else { return }
            let deadline = grid.deadlines[index]
            times[index] = __kernel_timespec(tv_sec: Int64(deadline / 1_000_000_000), tv_nsec: Int64(deadline % 1_000_000_000))
            io_uring_prep_timeout(entry, times + index, 0, UInt32(IORING_TIMEOUT_ABS))
            io_uring_sqe_set_data64(entry, UInt64(index))
        }

        func run() {
            for index in grid.deadlines.indices { queue(index) }
            while !stop.load(ordering: .relaxed) {
                io_uring_submit_and_wait(ring, 1)
                let now = MonotonicInstant.now().nanoseconds
                var completion: UnsafeMutablePointer<io_uring_cqe>?
                while __io_uring_peek_cqe(ring, &completion, nil) == 0, let cqe = completion {
                    let index = Int(cqe.pointee.user_data)
                    let expired = cqe.pointee.res == -ETIME
                    io_uring_cqe_seen(ring, cqe)
                    guard expired, index < grid.deadlines.count else { continue }
                    grid.fire(index, at: now)
                    queue(index)
                }
            }
            io_uring_queue_exit(ring)
        }
    }

    static func run(timers: Int, period: UInt64, seconds: Double, into tally: FanoutTally) throws {
        let loop = Loop(grid: RawFanoutGrid(timers: timers, period: period, recorder: tally.recorder))
        let started = DispatchSemaphore(value: 0)
        let ended = DispatchSemaphore(value: 0)
        let setUp = Atomic<Int32>(0)
        Thread.detachNewThread {
            let result = loop.setUp()
            setUp.store(result, ordering: .relaxed)
            started.signal()
            if result == 0 { loop.run() }
            ended.signal()
        }
        started.wait()
        let result = setUp.load(ordering: .relaxed)
        guard result == 0 else {
            ended.wait()
            throw TimerError.systemCall(call: "io_uring_setup", errno: -result)
        }
        // A timer is due every 10 µs or so: the loop sees the flag at once.
        measureFanoutSlice(seconds: seconds, into: tally) {
            loop.stop.store(true, ordering: .relaxed)
            ended.wait()
        }
    }
}
