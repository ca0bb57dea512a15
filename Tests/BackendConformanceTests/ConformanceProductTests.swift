import Foundation
import Testing
import TimerKit
import TimerKitConformance
import TimerKitTestSupport

/// What TimerKitConformance's documentation promises a backend author: how checks are named,
/// made, skipped and watched.
@Suite("TimerKitConformance")
struct ConformanceProductTests {
    @Test func everyCheckIsNamedByItsGroupAndNameAndNoNameRepeats() throws {
        let names = ConformanceCheck.all.map(\.testDescription)
        #expect(names.contains("contract/timersFireInDeadlineOrder"))
        #expect(names.count == 90)
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appending(path: "README.md")
        let text = try String(contentsOf: readme, encoding: .utf8).replacingOccurrences(of: "\n", with: " ")
        #expect(text.contains("the same \(names.count) contract checks"), "the README gives the number of checks")
        #expect(Set(names).count == names.count)
        for group in ConformanceCheck.Group.allCases {
            #expect(!ConformanceCheck.all(in: group).isEmpty, "\(group) has no check")
        }
        #expect(ConformanceCheck.all.count == ConformanceCheck.Group.allCases.map { ConformanceCheck.all(in: $0).count }.reduce(0, +))
    }

    /// Each check makes a backend of its own, on a registry of its own.
    @Test func eachCheckMakesItsOwnBackendOnAFreshRegistry() async throws {
        let registries = Locked<[TimerRegistry]>([])
        let counting = BackendUnderTest("counting") { registry in
            registries.withLock { $0.append(registry) }
            return .init(DispatchBackend(registry: registry))
        }
        let checks = ConformanceCheck.all(in: .contract).prefix(3)
        for check in checks { try await check.run(on: counting) }
        let made = registries.current
        #expect(made.count == checks.count)
        #expect(Set(made.map(ObjectIdentifier.init)).count == made.count)
        #expect(made.allSatisfy { $0 !== TimerRegistry.shared })
    }

    /// A need the backend opted out of skips its checks with the reason given, and the backend
    /// is never made for them; the checks that wait out real time skip on Manual.
    @Test func aCheckWhoseNeedIsOptedOutOfIsSkippedWithTheReason() async throws {
        let made = Counter()
        let noDisplay = BackendUnderTest("plain", optingOutOf: [.displayDelivery: "no display link here"]) { registry in
            made.increment()
            return .init(DispatchBackend(registry: registry))
        }
        let display = ConformanceCheck.all(in: .displayDelivery)
        #expect(!display.isEmpty)
        for check in display {
            #expect(check.skipReason(on: noDisplay) == "plain opted out of displayDelivery: no display link here")
            try await check.run(on: noDisplay)
        }
        #expect(made.current == 0)
        #expect(ConformanceCheck.all(in: .contract).allSatisfy { $0.skipReason(on: noDisplay) == nil })
        let realTimeOnly = ConformanceCheck.all.filter { $0.needs.contains(.realTime) }
        #expect(!realTimeOnly.isEmpty)
        #expect(realTimeOnly.allSatisfy { $0.skipReason(on: .manual)?.contains("manual runs on virtual time") == true })
        #expect(realTimeOnly.allSatisfy { $0.skipReason(on: .epoll) == nil })
    }

    /// A backend that hangs ends the test process within seconds, and the message names the
    /// check and the backend. (In a child process, with the watchdogs scaled to a tenth.)
    @Test func aCheckThatHangsEndsTheProcessNamingTheCheckAndTheBackend() async {
        let result = await #expect(processExitsWith: .exitCode(134), observing: [\.standardErrorContent]) {
            setenv("TIMERKIT_WATCHDOG_SCALE", "0.1", 1)
            let hangs = BackendUnderTest("hangs") { registry in
                .init(DispatchBackend(registry: registry), teardown: { while true { sleep(1) } })
            }
            guard let check = ConformanceCheck.all.first(where: { $0.name == "oneShotAtADeadline" }) else { exit(2) }
            try await check.run(on: hangs)
            exit(3)
        }
        let report = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(report.contains("WATCHDOG: oneShotAtADeadline [hangs] did not finish"), "\(report)")
    }
}
