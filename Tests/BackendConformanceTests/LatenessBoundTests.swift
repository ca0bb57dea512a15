import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit
import TimerKitTestSupport

/// `ConformanceCheck.latenessBound`: every check that measures when something happened fails
/// a backend that does it late, however correct it is otherwise.
@Suite("The lateness bound")
struct LatenessBoundTests {
    /// The checks that measure when a backend ran something: a handler's start, a sleep's end,
    /// a display frame. Each must fail the late backend. (Not `repeatsOfATaskAreFixedDelay…`:
    /// it holds its timer's fires to the bound as these do, but its tasks run on the shared
    /// pool, and on a backend a second late its six late steps outlast its watchdog when
    /// blocking tests hold that pool: 2 runs in 10 under load.)
    static let timingChecks = [
        "contract/oneShotFiresOnceAndNeverEarly", "contract/oneShotAtADeadline", "contract/repeatsWithACountStayOnTheGrid",
        "contract/skipDropsMissedTicksAndStaysOnTheGrid", "contract/burstDeliversEveryMissedTick",
        "contract/delayRestartsTheGridAfterALateTick", "contract/toleranceIsHonouredAsMayFireLate",
        "contract/registryObserversRecordLateness", "adversarial/toleranceBeyondTheIntervalIsCappedAtHalfOfIt",
        "helpers/aJitteredTimerFiresWithinItsWindowAfterEachGridPoint", "concurrency/aSleepEndsNoEarlierThanItsDeadline",
        "concurrency/aCountedTickSequenceDeliversEveryTickOnTheGridAndEnds", "concurrency/aSlowConsumerIsALateHandler",
        "concurrency/aBurstingSequenceDeliversEveryMissedTick",
        "displayDelivery/slowCallbacksDropFramesAndNothingArrivesAfterInvalidate", "clocks/aWallTimerFiresNoEarlierThanItsDate",
        "clocks/aContinuousTimerFiresAfterItsDelay", "clocks/aWallGridFiresOnItsDates",
    ]

    /// A backend that is right in every way but one: its loop runs the due timers only once
    /// the wake-up the scheduler asked for is `lateBy` old, so everything comes that much late.
    static func late(by lateBy: Duration) -> BackendUnderTest {
        BackendUnderTest("late") { registry in
            let backend = PumpedBackend(registry: registry)
            let loop = try LatePumpLoop(backend, lateBy: lateBy)
            return .init(backend, teardown: loop.stop)
        }
    }

    @Test(arguments: timingChecks)
    func aBackendThatRunsEverythingASecondLateFailsTheCheck(_ name: String) async throws {
        let check = try #require(ConformanceCheck.all.first { $0.description == name }, "no check \(name)")
        // A second late, and at least half a second beyond the bound however noisy the machine
        // (noise only adds lateness). Sanitized runs scale the bound, and so this.
        let backend = Self.late(by: max(.seconds(1), ConformanceCheck.appliedLatenessBound + .milliseconds(500)))
        let namedTheBound = Locked(false)
        // Off the cooperative pool: a blocking check waits out seconds of lateness here, and the
        // pool's two threads are what every other test of the run needs.
        let executor = ThreadTaskExecutor()
        defer { executor.stop() }
        try await withTaskExecutorPreference(executor) {
            // Other expectations may fail too (a late tick is also counted missed); at least
            // one issue must be the bound's.
            try await withKnownIssue("the backend runs everything a second late") {
                try await check.run(on: backend)
            } matching: { issue in
                if issue.comments.contains(where: { $0.rawValue.contains("ConformanceCheck.latenessBound") }) {
                    namedTheBound.withLock { $0 = true }
                }
                return true
            }
        }
        #expect(namedTheBound.current, "\(name) passed a backend a second late, or failed it without naming the lateness bound")
    }
}

extension LatenessBoundTests {
    /// Sanitized runs, several times slower, scale the watchdogs with `TIMERKIT_WATCHDOG_SCALE`;
    /// the bound scales with them, and never shrinks below `latenessBound`. (In child processes,
    /// where the variable is read afresh.)
    @Test(arguments: [("4", 2_000), ("0.1", 500), ("nonsense", 500)])
    func theBoundScalesWithTheWatchdogsButNeverShrinks(_ scale: String, _ milliseconds: Int) async {
        #expect(ConformanceCheck.latenessBound == .milliseconds(500))
        await #expect(processExitsWith: .success) { [scale, milliseconds] in
            setenv("TIMERKIT_WATCHDOG_SCALE", scale, 1)
            exit(ConformanceCheck.appliedLatenessBound == .milliseconds(milliseconds) ? 0 : 1)
        }
    }
}

/// `PumpedBackend`'s loop, late: it turns every millisecond, but runs the due timers only once
/// the deadline the scheduler asked to be woken at is `lateBy` in the past.
private final class LatePumpLoop: Sendable {
    private let loop: OwnedLoop

    init(_ backend: PumpedBackend, lateBy: Duration) throws {
        loop = try OwnedLoop(
            { loop in
                while !loop.isStopping {
                    let next = backend.nextDeadline
                    let now = MonotonicInstant.now()
                    if next != .distantFuture && now - next >= lateBy { backend.runDueTimers() }
                    blockRealTime(.milliseconds(1))
                }
            }, release: {})
    }

    func stop() { loop.stop {} }
}
