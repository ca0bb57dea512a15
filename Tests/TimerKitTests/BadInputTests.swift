import Testing
import TimerKitTestSupport

@testable @_spi(BackendImplementation) import TimerKit

@Suite("Bad input is a typed error naming the value")
struct BadInputTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let label: String
        let schedule: TimerSchedule
        var name: String? = nil
        var tolerance: Duration = .zero
        let expected: TimerError
        var testDescription: String { label }
    }

    static let cases: [Case] = [
        Case(label: "negative delay", schedule: .after(ms(-1)), expected: .negativeDuration(parameter: "delay", value: ms(-1))),
        Case(label: "NaN delay", schedule: .after(seconds: .nan), expected: .nonFiniteSeconds(parameter: "delay", value: .nan)),
        Case(
            label: "infinite delay", schedule: .after(seconds: .infinity), expected: .nonFiniteSeconds(parameter: "delay", value: .infinity)
        ),
        Case(
            label: "negative seconds", schedule: .after(seconds: -2), expected: .negativeDuration(parameter: "delay", value: .seconds(-2))),
        Case(label: "negative interval", schedule: .every(ms(-10)), expected: .negativeDuration(parameter: "interval", value: ms(-10))),
        Case(label: "zero interval", schedule: .every(.zero), expected: .zeroInterval(parameter: "interval")),
        Case(label: "zero interval in seconds", schedule: .every(seconds: 0), expected: .zeroInterval(parameter: "interval")),
        Case(
            label: "sub-nanosecond interval in seconds", schedule: .every(seconds: 1e-12),
            expected: .intervalBelowOneNanosecond(parameter: "interval", seconds: 1e-12)),
        Case(
            label: "sub-nanosecond interval", schedule: .every(Duration(secondsComponent: 0, attosecondsComponent: 500_000_000)),
            expected: .intervalBelowOneNanosecond(parameter: "interval", seconds: 5e-10)),
        Case(
            label: "zero interval on a grid", schedule: .every(.nanoseconds(0), startingAt: .distantFuture),
            expected: .zeroInterval(parameter: "interval")),
        Case(
            label: "infinite interval", schedule: .every(seconds: -.infinity),
            expected: .nonFiniteSeconds(parameter: "interval", value: -.infinity)),
        Case(
            label: "negative first delay", schedule: .every(ms(10), firstAfter: ms(-1)),
            expected: .negativeDuration(parameter: "firstAfter", value: ms(-1))),
        Case(label: "zero count", schedule: .every(ms(10), count: 0), expected: .invalidCount(0)),
        Case(label: "negative count", schedule: .every(ms(10), count: -3), expected: .invalidCount(-3)),
        Case(label: "empty name", schedule: .after(ms(1)), name: "", expected: .emptyName),
        Case(label: "reserved name", schedule: .after(ms(1)), name: "timer#12", expected: .reservedName("timer#12")),
        Case(
            label: "negative tolerance", schedule: .after(ms(1)), tolerance: ms(-1),
            expected: .negativeDuration(parameter: "tolerance", value: ms(-1))),
    ]

    @Test(arguments: cases)
    func badScheduleIsRefused(_ testCase: Case) {
        let registry = TimerRegistry()
        let clock = ManualBackend(registry: registry)
        defer { clock.shutdown() }
        // TimerError's equality treats NaN as equal to NaN, so even the NaN cases match.
        #expect(throws: testCase.expected) {
            try clock.schedule(testCase.schedule, name: testCase.name, tolerance: testCase.tolerance) { _ in }
        }
        #expect(registry.count == 0, "nothing is left behind by a refused schedule")
    }

    @Test func errorsNamingNaNEqualThemselves() {
        let nan = TimerError.nonFiniteSeconds(parameter: "delay", value: .nan)
        #expect(nan == nan)
        #expect(nan != .nonFiniteSeconds(parameter: "delay", value: .infinity))
        #expect(nan != .nonFiniteSeconds(parameter: "interval", value: .nan))
        #expect(TimerError.invalidFrameRate(.nan) == .invalidFrameRate(.nan))
        #expect(TimerError.intervalBelowOneNanosecond(parameter: "interval", seconds: 1e-12).description.contains("1 ns"))
    }

    @Test func badRescheduleKeepsTheOldSchedule() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let log = TickLog()
        let timer = try clock.schedule(.after(ms(10)), handler: log.record)
        #expect(throws: TimerError.zeroInterval(parameter: "interval")) { try timer.reschedule(.every(.zero)) }
        clock.advance(by: ms(10))
        #expect(log.count == 1)
    }

    @Test func hugeDurationsSaturateInsteadOfCrashing() throws {
        let clock = ManualBackend(registry: TimerRegistry())
        defer { clock.shutdown() }
        let timer = try clock.schedule(.every(.seconds(Int64.max), firstAfter: .seconds(Int64.max))) { _ in }
        let far = try clock.schedule(.after(seconds: 1e300)) { _ in }
        clock.advance(by: .seconds(1_000_000))
        #expect(timer.fireCount == 0)
        #expect(far.fireCount == 0)
    }

    @Test func errorsReadWell() {
        #expect(TimerError.invalidCount(0).description.contains("0"))
        #expect(TimerError.duplicateName("x").description.contains("'x'"))
        #expect(TimerError.systemCall(call: "timerfd_create", errno: 24).description.contains("timerfd_create"))
    }
}
