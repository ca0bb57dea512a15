import Foundation

/// A value shared with handlers on other threads.
final class Locked<Value>: @unchecked Sendable {
    // @unchecked: every access to `value` goes through `lock`.
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    var current: Value { withLock { $0 } }
}

extension Duration {
    /// Whole nanoseconds, clamped to `Int64` instead of trapping.
    var wholeNanoseconds: Int64 { Int64(clamping: attoseconds / 1_000_000_000) }

    /// Fractional microseconds, for reports.
    var microseconds: Double { Double(attoseconds) / 1e12 }
}

/// A timespec of `nanoseconds` since CLOCK_MONOTONIC's origin, for absolute timerfds.
func monotonicTimespec(_ nanoseconds: UInt64) -> timespec {
    timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
}
