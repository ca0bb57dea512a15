import Foundation
import Glibc
import Testing
import TimerKitTestSupport

/// Whether this process runs under ThreadSanitizer (`make tsan`).
private let underThreadSanitizer = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__tsan_init") != nil

/// Two threads write one field with nothing ordering them; one of the writes is made inside the
/// closure of `withUnsafeContinuation`, just before the continuation is resumed, as TimerKit's
/// tick streams and sleeps do.
private final class Unsynchronized: @unchecked Sendable {
    // @unchecked: deliberately not safe; the race is what the test is for.
    var field = 0
}

@Suite("ThreadSanitizer still catches races", .enabled(if: underThreadSanitizer, "runs only under ThreadSanitizer (make tsan)"))
struct SanitizerTests {
    /// `.ci/tsan.supp` hides the runtime's false reports about continuations. It must not hide
    /// a real race whose stack holds a continuation's closure or `resume`: this child makes one,
    /// under the same suppressions (inherited through `TSAN_OPTIONS`), and must be reported.
    @Test func aRaceBesideAContinuationIsStillReported() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let shared = Unsynchronized()
            Thread.detachNewThread {
                usleep(20_000)
                shared.field += 1
            }
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                shared.field += 1
                continuation.resume()
            }
            usleep(200_000)
            exit(0)  // ThreadSanitizer turns this into its own exit status when it reported
        }
        let report = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(report.contains("WARNING: ThreadSanitizer:") && report.contains("race"), "\(report)")
    }
}
