import Glibc
import Testing
import TimerKit
import TimerKitTestSupport

@Suite("Tick sequences")
struct TickSequenceTests {
    /// An iterator is not `Sendable`, so two tasks cannot share one without unsafe code; with
    /// it, the second concurrent `next()` stops the program with a message instead of leaving
    /// one consumer waiting forever.
    @Test func twoConcurrentNextCallsStopWithAMessage() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            /// Carries an iterator where the compiler would refuse it (the misuse under test).
            final class Smuggled: @unchecked Sendable {
                var iterator: TimerTicks.Iterator
                init(_ iterator: TimerTicks.Iterator) { self.iterator = iterator }
            }
            let clock = ManualBackend(registry: TimerRegistry())
            let ticks = try clock.ticks(.every(.seconds(1)))
            let first = Smuggled(ticks.makeAsyncIterator())
            let second = Smuggled(first.iterator)
            let waiting = Task { await first.iterator.next() }
            // The first call waits once it has resumed the timer.
            while ticks.timer.currentState != .scheduled { usleep(1000) }
            _ = await second.iterator.next()
            _ = await waiting.value
        }
        let message = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(message.contains("next() was called while another call of it was waiting"))
    }
}
