import Synchronization
import Testing
import TimerKit

/// A key given to a backend that did not return it, as `TimerKey`'s documentation and the
/// "Holding millions of timers" article say: `isActive(_:)` is false, `cancel(_:)` does nothing,
/// `reschedule(_:_:)`, `suspend(_:)` and `resume(_:)` throw `invalidOption` naming the key, and
/// no timer of either backend changes, not even the other backend's own timer in the key's slot
/// with its generation. On two backend types of TimerKit itself, each key tried on a backend of
/// either type.
@Suite("Keys of another backend")
struct ForeignKeyTests {
    /// A backend type under test, by name.
    enum Kind: String, CaseIterable, CustomTestStringConvertible {
        case manual, dispatch

        func make(_ registry: TimerRegistry) -> any TimerBackend {
            switch self {
            case .manual: ManualBackend(registry: registry)
            case .dispatch: DispatchBackend(registry: registry)
            }
        }

        var testDescription: String { rawValue }
    }

    /// Counts what a timer's callback hears.
    final class Recorder: TimerCallback {
        let fires = Atomic(0)
        let ends = Atomic(0)
        func timerFired(_ fire: TimerFire) { fires.add(1, ordering: .relaxed) }
        func timerEnded(_ key: TimerKey, reason: TimerEndReason, fires: Int) { ends.add(1, ordering: .relaxed) }
    }

    /// What a timer's registry entry says of it that a foreign call could change.
    struct Observed: Equatable {
        let state: TimerState
        let nextDeadline: MonotonicInstant?
        let interval: Duration?

        init(_ snapshot: TimerSnapshot) {
            (state, nextDeadline, interval) = (snapshot.state, snapshot.nextDeadline, snapshot.interval)
        }
    }

    /// The part of a key's description that names its slot and generation ("3.0").
    static func slotAndGeneration(_ key: TimerKey) -> Substring? {
        key.description.split(separator: "(").dropFirst().first?.split(separator: " ").first
    }

    static let pairs: [(Kind, Kind)] = Kind.allCases.flatMap { owner in Kind.allCases.map { (owner, $0) } }

    @Test(arguments: pairs)
    func aKeyOfAnotherBackendReachesNoneOfItsTimers(owner ownerKind: Kind, other otherKind: Kind) throws {
        let ownerRegistry = TimerRegistry()
        let otherRegistry = TimerRegistry()
        let owner = ownerKind.make(ownerRegistry)
        defer { owner.shutdown() }
        let other = otherKind.make(otherRegistry)
        defer { other.shutdown() }
        let ownerCallback = Recorder()
        let otherCallback = Recorder()
        // Each backend's first timer, an hour away: the two keys name the same slot and
        // generation, each of its own backend.
        let key = try owner.schedule(.after(.seconds(3600)), name: "owner's", calling: ownerCallback)
        let othersOwn = try other.schedule(.after(.seconds(3600)), name: "other's", calling: otherCallback)
        #expect(key != othersOwn)
        #expect(Self.slotAndGeneration(key) != nil && Self.slotAndGeneration(key) == Self.slotAndGeneration(othersOwn))
        let ownerBefore = Observed(try ownerRegistry.snapshot(named: "owner's"))
        let otherBefore = Observed(try otherRegistry.snapshot(named: "other's"))

        #expect(!other.isActive(key))
        other.cancel(key)
        /// Whether `error` is the refusal of a foreign key: `invalidOption` naming it.
        func isTheForeignKeyError(_ error: TimerError?) -> Bool {
            guard case .invalidOption(let name, let value, _)? = error else { return false }
            return name == "key" && value == key.description
        }
        #expect(isTheForeignKeyError(#expect(throws: TimerError.self) { try other.reschedule(key, .after(.milliseconds(1))) }))
        #expect(isTheForeignKeyError(#expect(throws: TimerError.self) { try other.reschedule(key, .every(.seconds(1))) }))
        #expect(isTheForeignKeyError(#expect(throws: TimerError.self) { try other.suspend(key) }))
        #expect(isTheForeignKeyError(#expect(throws: TimerError.self) { try other.resume(key) }))

        // Neither timer changed: both live, as scheduled, and neither callback heard anything.
        #expect(owner.isActive(key) && other.isActive(othersOwn))
        #expect(Observed(try ownerRegistry.snapshot(named: "owner's")) == ownerBefore)
        #expect(Observed(try otherRegistry.snapshot(named: "other's")) == otherBefore)
        #expect(ownerBefore.state == .scheduled && otherBefore.state == .scheduled)
        for recorder in [ownerCallback, otherCallback] {
            #expect(recorder.fires.load(ordering: .relaxed) == 0 && recorder.ends.load(ordering: .relaxed) == 0)
        }

        // The key still works on its own backend.
        try owner.suspend(key)
        #expect(try ownerRegistry.snapshot(named: "owner's").state == .suspended)
        owner.cancel(key)
        #expect(!owner.isActive(key) && ownerCallback.ends.load(ordering: .relaxed) == 1)
        #expect(other.isActive(othersOwn) && otherCallback.ends.load(ordering: .relaxed) == 0)
    }
}
