import Dispatch
import NIOCore
import NIOPosix
import Synchronization
import TimerKit

/// The loop the `nio` backend (TimerKit on SwiftNIO) runs on: one thread, as `nio-raw`'s.
let benchEventLoopGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)

/// NIO tasks an hour away that the bench keeps on every NIO loop it measures
/// (`--nio-background-tasks`), as a server's loop holds its connections' own timeouts.
let nioBackgroundTaskCount = Atomic<Int>(0)

/// Schedules the background tasks on `loop`; they never fire during a run.
func addNIOBackgroundTasks(to loop: any EventLoop) {
    let count = nioBackgroundTaskCount.load(ordering: .relaxed)
    guard count > 0 else { return }
    for _ in 0..<count { loop.scheduleTask(in: .hours(1)) {} }
}

/// `nio-raw`: SwiftNIO's own timers on a one-thread `MultiThreadedEventLoopGroup`, as a NIO
/// server uses them, with no TimerKit code. Its deadlines are CLOCK_MONOTONIC on Linux, as
/// TimerKit's are, so lateness is read on the same clock.
enum NIOPeer {
    static let name = "nio-raw"

    /// Runs `body` on a fresh one-thread group's loop and shuts the group down afterwards.
    static func withLoop<R>(_ body: (any EventLoop) throws -> R) throws -> R {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        addNIOBackgroundTasks(to: group.next())
        return try body(group.next())
    }

    static func deadline(_ nanoseconds: UInt64) -> NIODeadline { .uptimeNanoseconds(nanoseconds) }

    /// Latency: a 1-interval grid kept by a task that schedules the next one at the next grid
    /// point (`scheduleRepeatedTask` is fixed-delay, so it would drift off the grid).
    @Sendable static func latency(interval: Duration, seconds: Double, recorder: LatencyRecorder) throws {
        try withLoop { loop in
            let period = UInt64(interval.wholeNanoseconds)
            let end = MonotonicInstant.now().nanoseconds + UInt64(seconds * 1e9)
            let done = DispatchSemaphore(value: 0)
            @Sendable func arm(_ due: UInt64) {
                loop.scheduleTask(deadline: deadline(due)) {
                    let now = MonotonicInstant.now().nanoseconds
                    var next = due + period
                    var missed = 0
                    while next <= now {
                        next += period
                        missed += 1
                    }
                    recorder.record(scheduled: due, actual: now, missed: missed)
                    if now >= end { done.signal() } else { arm(next) }
                }
            }
            loop.execute { arm(MonotonicInstant.now().nanoseconds + period) }
            done.wait()
        }
    }

    /// First fire: fresh 1 ms `scheduleTask`s, one at a time, from an idle loop.
    @Sendable static func firstFire(samples: Int, recorder: LatencyRecorder) throws {
        try withLoop { loop in
            for _ in 0..<samples {
                let fired = DispatchSemaphore(value: 0)
                let due = MonotonicInstant.now().nanoseconds + 1_000_000
                loop.scheduleTask(deadline: deadline(due)) {
                    recorder.record(scheduled: due, actual: MonotonicInstant.now().nanoseconds, missed: 0)
                    fired.signal()
                }
                _ = fired.wait(timeout: .now() + .seconds(5))
                pause(0.002)
            }
        }
    }

    /// Fan-out: `timers` fixed-delay `scheduleRepeatedTask`s of `period` with random first
    /// delays. Lateness of a run is read against the previous run plus the delay (what NIO
    /// promises), the first run's against its initial delay.
    static func fanout(timers: Int, period: Int64, seconds: Double, into tally: FanoutTally) throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        addNIOBackgroundTasks(to: loop)
        let recorder = tally.recorder
        let start = MonotonicInstant.now().nanoseconds + 50_000_000
        for _ in 0..<timers {
            let first = start + UInt64.random(in: 0..<UInt64(period))
            let due = NIOLoopBoundBox.makeBoxSendingValue(first, eventLoop: loop)
            loop.scheduleRepeatedTask(
                initialDelay: .nanoseconds(Int64(first) - Int64(MonotonicInstant.now().nanoseconds)), delay: .nanoseconds(period)
            ) { _ in
                let now = MonotonicInstant.now().nanoseconds
                recorder.record(scheduled: due.value, actual: now, missed: 0)
                due.value = now + UInt64(period)
            }
        }
        measureFanoutSlice(seconds: seconds, into: tally) {
            try? group.syncShutdownGracefully()
        }
    }
}
