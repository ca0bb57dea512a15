import Dispatch
import Foundation
import Testing
@_spi(BackendImplementation) import TimerKit

extension Checks {
    /// Several threads doing random things to a shared pool of timers while they fire.
    /// `make test` runs a short round per backend; set TIMERKIT_STRESS_SECONDS for longer.
    enum Stress {
        static let seconds: Double = ProcessInfo.processInfo.environment["TIMERKIT_STRESS_SECONDS"].flatMap(Double.init) ?? 1

        /// What the threads share: the pool, the timers whose `cancelAndWait` has returned,
        /// and every broken promise seen.
        final class Shared: Sendable {
            let slots: [Locked<TimerHandle?>] = (0..<32).map { _ in Locked(nil) }
            let waitedOut = Locked<Set<UInt64>>([])
            let broken = Locked<[String]>([])
            let operations = Counter()
            let fires = Counter()

            func breach(_ what: String) { broken.withLock { if $0.count < 20 { $0.append(what) } } }
        }

        static func randomOperationsFromManyThreadsKeepEveryPromise(_ kind: BackendUnderTest) throws {
            let h = try kind.makeHarness(watchdogSeconds: 60 + Self.seconds * 2)
            defer { h.shutdown() }
            let shared = Shared()
            let stopDriving = Locked(false)
            if let manual = h.manual {
                onBackgroundThread {
                    while !stopDriving.current { manual.advance(by: .microseconds(100)) }
                }
            }
            let end = MonotonicInstant.now() + .nanoseconds(Int64(Self.seconds * 1e9))
            onThreads(4) { worker in
                var rng = SystemRandomNumberGenerator()
                // At least one operation each: on a loaded machine a thread may first run after
                // `end` (a run under load saw 0 operations in all).
                repeat {
                    Self.randomOperation(worker: worker, on: h, shared, &rng)
                    shared.operations.increment()
                } while MonotonicInstant.now() < end
            }
            for slot in shared.slots {
                if let timer = slot.withLock({ $0.take() }) { timer.cancelAndWait() }
            }
            stopDriving.withLock { $0 = true }
            #expect(shared.broken.current.isEmpty, "\(shared.broken.current)")
            #expect(h.waitUntil { h.registry.count == 0 }, "registry still holds \(h.registry.snapshot())")
            // Only that the workers ran: under TSan on a busy machine a second holds under 100.
            #expect(shared.operations.current > 0)
        }

        static func randomOperation(worker: Int, on h: Harness, _ shared: Shared, _ rng: inout SystemRandomNumberGenerator) {
            let slot = shared.slots[Int.random(in: 0..<shared.slots.count, using: &rng)]
            let timer = slot.current
            switch Int.random(in: 0..<100, using: &rng) {
            case 0..<25 where timer == nil:
                let schedule: TimerSchedule =
                    Bool.random(using: &rng)
                    ? .after(.microseconds(Int64.random(in: 0...3000, using: &rng)))
                    : .every(.microseconds(Int64.random(in: 200...3000, using: &rng)), count: Bool.random(using: &rng) ? 5 : nil)
                let policy = MissedTickPolicy.allCases.randomElement(using: &rng) ?? .skip
                let name: String? = Bool.random(using: &rng) ? "w\(worker)-\(Int.random(in: 0..<8, using: &rng))" : nil
                do throws(TimerError) {
                    let scheduled = try h.backend.schedule(schedule, name: name, missedTicks: policy) { tick in
                        if shared.waitedOut.current.contains(tick.timer.id) {
                            shared.breach("\(tick.timer.name) began after its cancelAndWait() returned")
                        }
                        shared.fires.increment()
                    }
                    let displaced = slot.withLock { current in
                        defer { current = scheduled }
                        return current
                    }
                    displaced?.cancel()
                } catch .duplicateName {
                    // Another thread holds that name now: refused, as promised.
                } catch {
                    shared.breach("schedule failed: \(error)")
                }
            case 0..<25:
                timer?.cancel()
            case 25..<40:
                guard let timer = slot.withLock({ $0.take() }) else { return }
                timer.cancelAndWait()
                shared.waitedOut.withLock { _ = $0.insert(timer.id) }
            case 40..<55:
                expectOnlyEndedErrors(shared) { () throws(TimerError) in try timer?.suspend() }
            case 55..<70:
                expectOnlyEndedErrors(shared) { () throws(TimerError) in try timer?.resume() }
            case 70..<80:
                let schedule: TimerSchedule = .every(.microseconds(Int64.random(in: 200...3000, using: &rng)))
                expectOnlyEndedErrors(shared) { () throws(TimerError) in try timer?.reschedule(schedule) }
            case 80..<90:
                guard let timer else { return }
                // A caller's name may be taken again once its timer ends; a generated one never.
                if let found = h.registry.timer(named: timer.name), found !== timer, timer.name.hasPrefix("timer#") {
                    shared.breach("lookup of \(timer.name) found another timer")
                }
            default:
                for snapshot in h.registry.snapshot() where snapshot.state.hasEnded {
                    shared.breach("snapshot listed \(snapshot.name) as \(snapshot.state)")
                }
            }
        }

        /// Runs `body`; a timer that has ended refuses with `timerEnded`, and that is all.
        static func expectOnlyEndedErrors(_ shared: Shared, _ body: () throws(TimerError) -> Void) {
            do throws(TimerError) {
                try body()
            } catch .timerEnded {
            } catch {
                shared.breach("unexpected \(error)")
            }
        }
    }
}
