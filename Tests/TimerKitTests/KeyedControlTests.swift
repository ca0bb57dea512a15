import Synchronization
import Testing
import TimerKit

/// A handle's operations are its key's: the scheduler tells a live timer by its key's serial,
/// slot, generation and state alone. These try the cases where that could be wrong: a slot the
/// store has never handed out (a generated name can name one), a key of a backend whose chunks
/// another backend now uses, and a handle whose slot holds a newer timer.
@Suite("Keyed control")
struct KeyedControlTests {
    final class Quiet: TimerCallback {
        func timerFired(_ fire: TimerFire) {}
    }

    @Test func aGeneratedNameOfASlotNeverHandedOutFindsNothingAndTheSlotStaysFree() throws {
        let registry = TimerRegistry()
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let first = try backend.schedule(.after(.seconds(60))) { _ in }
        #expect(first.name == "timer#0")
        // Slots 1... of the chunk the store was lent have never held a timer: their generation
        // is 0, as the names below say, but no timer is there.
        for slot in 1...8 { #expect(registry.timer(named: "timer#\(slot)") == nil, "timer#\(slot)") }
        // The lookups left the slots free: the next timers take them, and are found by those names.
        var later: [TimerHandle] = []
        for _ in 1...8 { later.append(try backend.schedule(.after(.seconds(60))) { _ in }) }
        for handle in later { #expect(registry.timer(named: handle.name) === handle) }
        #expect(Set(later.map(\.name)) == Set((1...8).map { "timer#\($0)" }))
    }

    @Test func aKeyOfABackendThatIsGoneReachesNothingOnTheBackendThatNowHasItsSlots() throws {
        let registry = TimerRegistry()
        var gone: ManualBackend? = ManualBackend(registry: registry)
        let callback = Quiet()
        let oldKey = try #require(gone).schedule(.after(.seconds(60)), calling: callback)
        gone?.shutdown()
        gone = nil
        // The registry lends the chunk again: the new backend's first timers sit in the old
        // key's slot.
        let backend = ManualBackend(registry: registry)
        defer { backend.shutdown() }
        let keys = try (0..<4).map { _ in try backend.schedule(.after(.seconds(60)), calling: callback) }
        #expect(!backend.isActive(oldKey))
        backend.cancel(oldKey)
        #expect(throws: TimerError.self) { try backend.reschedule(oldKey, .after(.seconds(1))) }
        #expect(throws: TimerError.self) { try backend.suspend(oldKey) }
        for key in keys { #expect(backend.isActive(key)) }
        #expect(registry.snapshot().allSatisfy { $0.state == .scheduled && $0.nextDeadline != nil })
    }

    @Test func aHandleWhoseSlotHoldsANewerTimerChangesNothingAndNamesItsOwnEnd() throws {
        let backend = ManualBackend(registry: TimerRegistry())
        defer { backend.shutdown() }
        let old = try backend.schedule(.after(.seconds(60)), name: "old") { _ in }
        old.cancel()
        // The freed slot is taken at once by the next timer, with the next generation.
        let new = try backend.schedule(.after(.seconds(60)), name: "new") { _ in }
        #expect(old.currentState == .cancelled && old.endReason == .cancelled && old.name == "old")
        old.cancel()
        #expect(throws: TimerError.timerEnded(name: "old", state: .cancelled)) { try old.reschedule(.after(.seconds(1))) }
        #expect(throws: TimerError.timerEnded(name: "old", state: .cancelled)) { try old.suspend() }
        #expect(throws: TimerError.timerEnded(name: "old", state: .cancelled)) { try old.resume() }
        #expect(new.currentState == .scheduled && new.isActive)
        #expect(new.snapshot.nextDeadline == backend.now() + .seconds(60))
    }
}
