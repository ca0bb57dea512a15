import CTimerShims
import Dispatch
import Testing
import TimerKitEpoll
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

/// Collects frames from the vsync thread.
final class FrameLog: Sendable {
    private let frames = Locked<[DisplayFrame]>([])
    func record(_ frame: DisplayFrame) { frames.withLock { $0.append(frame) } }
    var all: [DisplayFrame] { frames.current }
    var count: Int { frames.current.count }
}

@Suite("DisplayLink")
struct DisplayLinkTests {
    @Test(arguments: [
        (60, 0.0, 60.0), (60, 60, 60), (60, 100, 60), (60, 45, 60), (60, 40, 30), (60, 30, 30),
        (60, 24, 20), (60, 20, 20), (60, 15, 15), (60, 10, 10), (60, 1, 1),
        (120, 60, 60), (120, 90, 120), (120, 30, 30), (120, 24, 24),
    ])
    func preferredRatesRoundToADivisorOfTheRefreshRate(_ refresh: Int, _ preferred: Double, _ expected: Double) throws {
        let source = try DisplaySource(refreshRate: refresh, priority: .normal, registry: TimerRegistry())
        defer { source.shutdown() }
        let divisor = try source.divisor(forPreferredFramesPerSecond: preferred)
        #expect(Double(refresh) / Double(divisor) == expected)
    }

    @Test(arguments: [-1.0, .nan, .infinity])
    func badPreferredRatesAreTypedErrors(_ rate: Double) throws {
        let source = try DisplaySource(refreshRate: 60, priority: .normal, registry: TimerRegistry())
        defer { source.shutdown() }
        let error = #expect(throws: TimerError.self) { try source.addLink(preferredFramesPerSecond: rate) { _ in } }
        #expect(error?.description == TimerError.invalidFrameRate(rate).description)
    }

    @Test(arguments: [0, -5, 1001])
    func badRefreshRatesAreTypedErrors(_ rate: Int) {
        #expect(throws: TimerError.invalidFrameRate(Double(rate))) { try DisplaySource(refreshRate: rate, registry: TimerRegistry()) }
    }

    @Test func framesSitOnTheVsyncGrid() throws {
        let source = try DisplaySource(refreshRate: 200, priority: .normal, registry: TimerRegistry())
        defer { source.shutdown() }
        let log = FrameLog()
        let link = try source.addLink(preferredFramesPerSecond: 100, action: log.record)
        #expect(waitFor { log.count >= 8 })
        link.invalidate()
        #expect(link.framesPerSecond == 100)
        let period = source.period.saturatingNanoseconds
        for frame in log.all {
            #expect((frame.timestamp.nanoseconds - source.start.nanoseconds) % UInt64(period * 2) == 0)
            #expect(frame.targetTimestamp == frame.timestamp + frame.duration)
            #expect(frame.duration == source.period * 2)
            #expect(frame.actual >= frame.timestamp)
        }
    }

    @Test func aCallbackThatSleepsThroughTwoFramesDropsThem() throws {
        let source = try DisplaySource(refreshRate: 100, priority: .normal, registry: TimerRegistry())
        defer { source.shutdown() }
        let log = FrameLog()
        let link = try source.addLink { frame in
            log.record(frame)
            // Sleeps through the two whole frames after it (+10 and +20 ms); the +30 ms vsync
            // is then pending and delivered late, as CADisplayLink does.
            if log.count == 3 { blockRealTime(.milliseconds(35)) }
        }
        #expect(waitFor { log.count >= 6 })
        link.handle.cancelAndWait()  // statistics are complete once no callback is running
        let frames = log.all
        #expect(frames[3].dropped >= 2, "the 35 ms callback slept through two 10 ms frames")
        for (previous, frame) in zip(frames, frames.dropFirst()) {
            #expect(frame.timestamp - previous.timestamp == frame.duration * (frame.dropped + 1), "dropped frames account for every gap")
        }
        let stats = link.statistics
        #expect(stats.framesDropped == frames.map(\.dropped).reduce(0, +))
        #expect(stats.overruns >= 1)
        #expect(stats.longestCallback >= .milliseconds(35))
        #expect(source.droppedVsyncs >= 1, "the vsync thread itself woke whole frames late")
    }

    @Test func pausingKeepsTheLinkButSilencesIt() throws {
        let registry = TimerRegistry()
        let source = try DisplaySource(refreshRate: 200, priority: .normal, registry: registry)
        defer { source.shutdown() }
        let log = FrameLog()
        let link = try source.addLink(action: log.record)
        #expect(waitFor { log.count >= 2 })
        link.isPaused = true
        #expect(link.isPaused)
        let atPause = log.count
        blockRealTime(.milliseconds(50))
        #expect(log.count <= atPause + 1)
        #expect(registry.count == 1, "a paused link stays registered")
        try link.setPaused(false)
        #expect(waitFor { log.count >= atPause + 3 })
    }

    @Test func aLinkCanInvalidateItselfAndLaterUseIsATypedError() throws {
        let registry = TimerRegistry()
        let source = try DisplaySource(refreshRate: 200, priority: .normal, registry: registry)
        defer { source.shutdown() }
        let log = FrameLog()
        let link = try source.addLink(name: "hud") { frame in
            log.record(frame)
            if log.count == 3 { registry.timer(named: "hud")?.cancel() }
        }
        #expect(waitFor { !link.isValid })
        blockRealTime(.milliseconds(30))
        #expect(log.count == 3)
        link.invalidate()
        #expect(throws: TimerError.timerEnded(name: "hud", state: .cancelled)) { try link.setPaused(true) }
        #expect(throws: TimerError.timerEnded(name: "hud", state: .cancelled)) { try link.setPreferredFramesPerSecond(30) }
        #expect(registry.count == 0)
    }

    final class Renderer: Sendable {
        let frames = Locked(0)
        let gone: Locked<Bool>
        init(_ gone: Locked<Bool>) { self.gone = gone }
        deinit { gone.withLock { $0 = true } }
    }

    @Test func aReleasedTargetEndsItsLink() throws {
        let registry = TimerRegistry()
        let source = try DisplaySource(refreshRate: 200, priority: .normal, registry: registry)
        defer { source.shutdown() }
        let gone = Locked(false)
        var renderer: Renderer? = Renderer(gone)
        let link = try source.addLink(target: renderer!, name: "renderer") { renderer, _ in renderer.frames.withLock { $0 += 1 } }
        #expect(waitFor { (renderer?.frames.current ?? 0) >= 2 })
        #expect(try registry.snapshot(named: "renderer").backend == "display@200Hz")
        renderer = nil
        #expect(waitFor { gone.current })
        #expect(waitFor { registry.count == 0 }, "the link notices at its next frame")
        #expect(waitFor { !link.isValid })
    }

    @Test func callbacksCanBeDeliveredOnAnotherBackend() throws {
        let source = try DisplaySource(refreshRate: 200, priority: .normal, registry: TimerRegistry())
        defer { source.shutdown() }
        let queue = DispatchBackend(registry: TimerRegistry())
        defer { queue.shutdown() }
        let threads = Locked<Set<Int32>>([])
        let link = try source.addLink(deliverOn: queue) { _ in threads.withLock { _ = $0.insert(ctk_gettid()) } }
        #expect(waitFor { !threads.current.isEmpty })
        link.invalidate()
        #expect(!threads.current.contains(source.threadID))
    }

    @Test func theRateCanChangeWhileRunning() throws {
        let source = try DisplaySource(refreshRate: 200, priority: .normal, registry: TimerRegistry())
        defer { source.shutdown() }
        let log = FrameLog()
        let link = try source.addLink(action: log.record)
        #expect(waitFor { log.count >= 2 })
        try link.setPreferredFramesPerSecond(50)
        #expect(link.framesPerSecond == 50)
        let before = log.count
        #expect(waitFor { log.count >= before + 3 })
        #expect(log.all.last?.duration == source.period * 4)
    }

    /// CADisplayLink does not tick without a link: neither does the source's thread, with
    /// no link, with its only link paused, or after the link is invalidated.
    @Test func aSourceWithNoRunningLinkDoesNotWake() async throws {
        // On a thread of its own: it blocks for seconds, which on the cooperative pool holds
        // back other tests' async steps.
        try await withWatchdog { () async throws in
            let source = try DisplaySource(refreshRate: 200, priority: .normal, registry: TimerRegistry())
            defer { source.shutdown() }
            func wakeUps(over duration: Duration) throws -> Int {
                let before = try #require(voluntarySwitches(threadID: source.threadID))
                blockRealTime(duration)
                return try #require(voluntarySwitches(threadID: source.threadID)) - before
            }
            // The thread is blocked in the kernel ("S"), not runnable and merely starved of CPU.
            func isAsleep() -> Bool {
                let status = (try? String(contentsOfFile: "/proc/self/task/\(source.threadID)/status", encoding: .utf8)) ?? ""
                return status.split(separator: "\n").contains { $0.hasPrefix("State:") && $0.contains("S (sleeping)") }
            }
            // Until a 50 ms window without a wake-up that ends with the thread asleep (past its
            // start-up, or the vsync that finds nothing due and disarms): a fixed 20 ms was too short
            // at load average 24, and under ThreadSanitizer a thread starved of CPU for 50 ms made no
            // wake-up either, then woke in the 1 s window. A thread that keeps waking never
            // settles, and the 1 s window then fails.
            func settle() { waitFor { (try? wakeUps(over: .milliseconds(50))) == 0 && isAsleep() } }
            settle()
            #expect(try wakeUps(over: .seconds(1)) == 0, "no link: the vsync thread sleeps")
            let log = FrameLog()
            let link = try source.addLink(action: log.record)
            #expect(waitFor { log.count >= 3 })
            #expect(try wakeUps(over: .milliseconds(100)) >= 5, "a running link ticks (200 Hz)")
            try link.setPaused(true)
            settle()
            #expect(try wakeUps(over: .seconds(1)) == 0, "a paused link: the vsync thread sleeps")
            try link.setPaused(false)
            #expect(waitFor { log.count >= 6 })
            link.invalidate()
            settle()
            #expect(try wakeUps(over: .seconds(1)) == 0, "an invalidated link: the vsync thread sleeps")
        }
    }

    /// The thread wakes for the frames links take, not for every vsync: a 2 fps link on a
    /// 100 Hz source wakes it twice a second, not a hundred times.
    @Test func theSourceWakesOnlyForFramesALinkTakes() throws {
        let source = try DisplaySource(refreshRate: 100, priority: .normal, registry: TimerRegistry())
        defer { source.shutdown() }
        let log = FrameLog()
        let link = try source.addLink(preferredFramesPerSecond: 2, action: log.record)
        #expect(waitFor { log.count >= 1 })
        let before = try #require(voluntarySwitches(threadID: source.threadID))
        let wakeUpsBefore = source.wakeUps
        #expect(waitFor { log.count >= 3 })
        let switches = try #require(voluntarySwitches(threadID: source.threadID)) - before
        link.invalidate()
        // Waking for every vsync would be ~100 switches over these two frames; a few more than the
        // frames come from waits on locks, more of them under TSan on a busy machine.
        #expect(switches < 50, "the vsync thread slept \(switches) times for 2 frames")
        #expect(source.wakeUps - wakeUpsBefore <= 3)
        #expect(link.statistics.framesDropped == 0)
    }

    /// A steady link costs the vsync thread one system call per frame, the wait: its timerfd
    /// repeats on the link's grid, and is re-armed only when the next deadline is off that grid.
    /// Before, every frame also re-armed it. A frame the thread is too late for puts the next
    /// deadline off the timerfd's grid, so each dropped frame may cost one re-arm: a busy machine
    /// (or ThreadSanitizer) drops some.
    @Test func aSteadyLinkCostsOneWaitPerFrameAndNoRearm() throws {
        let source = try DisplaySource(refreshRate: 200, priority: .normal, registry: TimerRegistry())
        defer { source.shutdown() }
        let log = FrameLog()
        let link = try source.addLink(action: log.record)
        defer { link.invalidate() }
        #expect(waitFor { log.count >= 3 })
        let before = (source.loopCounts.waits, source.loopCounts.rearms, log.count, link.statistics.framesDropped, source.droppedVsyncs)
        #expect(waitFor { log.count >= before.2 + 40 })
        let waits = source.loopCounts.waits - before.0
        let rearms = source.loopCounts.rearms - before.1
        let dropped = (link.statistics.framesDropped - before.3) + (source.droppedVsyncs - before.4)
        #expect(waits >= 40, "a wait per frame: \(waits)")
        #expect(
            rearms <= 2 + dropped,
            "the grid repeats without a re-arm: \(rearms) re-arms in \(waits) wake-ups, \(dropped) frames dropped")
    }

    /// A plain timer on a source keeps its own deadline: it is not moved to a vsync.
    @Test func aPlainTimerOnASourceKeepsItsDeadline() throws {
        let source = try DisplaySource(refreshRate: 1, priority: .normal, registry: TimerRegistry())
        defer { source.shutdown() }
        let fired = Locked<Duration?>(nil)
        let scheduled = MonotonicInstant.now()
        try source.schedule(.after(.milliseconds(100))) { tick in fired.withLock { $0 = tick.actual - scheduled } }
        #expect(waitFor { fired.current != nil })
        // The next vsync of a 1 Hz source is about a second away.
        #expect(try #require(fired.current) < .milliseconds(700), "the timer waited for a vsync")
    }

    @Test func theVsyncThreadReportsThePriorityItGot() throws {
        let source = try DisplaySource(refreshRate: 60, registry: TimerRegistry())
        defer { source.shutdown() }
        let got = source.obtainedPriority
        #expect(got.priority == .realtime(80) || got.fallbackReason != nil, "\(got)")
    }
}
