import Glibc

/// A figure measured in repeated slices: their median, and an interval that holds the true
/// median with the stated confidence, from order statistics (no assumption about the shape of
/// the noise, which on a busy machine is anything but normal).
///
/// For n slices the interval is [x₍k₎, x₍n+1−k₎] of the sorted slices, with the largest k for
/// which P(Binomial(n, ½) < k) ≤ 2.5 %; its confidence is 1 − 2·P(Binomial(n, ½) < k). Five
/// slices or fewer give [min, max] at 1 − 2⁻ⁿ⁺¹ (93.75 % for five).
public struct Estimate: Codable, Equatable, Sendable {
    public var median: Double
    public var ci95Low: Double
    public var ci95High: Double
    /// The interval's confidence (0.95 or more, when there are six slices or more).
    public var confidence: Double
    public var slices: [Double]

    public init(slices: [Double]) {
        self.slices = slices
        let sorted = slices.sorted()
        let n = sorted.count
        guard n > 0 else {
            (median, ci95Low, ci95High, confidence) = (0, 0, 0, 0)
            return
        }
        median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2
        // The largest k with P(B < k) ≤ 0.025, at least 1; P(B < k) = Σ_{i<k} C(n,i) / 2^n.
        var k = 1
        var below = Self.binomialHalf(n, atMost: 0)  // P(B < 1)
        while k < n / 2 {
            let next = below + Self.binomialHalf(n, exactly: k)
            if next > 0.025 { break }
            below = next
            k += 1
        }
        ci95Low = sorted[k - 1]
        ci95High = sorted[n - k]
        confidence = n == 1 ? 0 : 1 - 2 * below
    }

    /// Whether there is an interval: two slices or more. One slice is a point, whose noise is
    /// unknown.
    public var hasInterval: Bool { slices.count > 1 }

    /// Half the interval's width, for a table's "± x".
    public var halfWidth: Double { (ci95High - ci95Low) / 2 }

    /// Whether the two intervals overlap: if they do, the difference is within the noise.
    public func overlaps(_ other: Estimate) -> Bool { ci95Low <= other.ci95High && other.ci95Low <= ci95High }

    static func binomialHalf(_ n: Int, exactly k: Int) -> Double {
        // C(n,k) / 2^n in logs, to stay finite for large n.
        var logChoose = 0.0
        for i in 0..<k { logChoose += log(Double(n - i)) - log(Double(i + 1)) }
        return exp(logChoose - Double(n) * log(2.0))
    }

    static func binomialHalf(_ n: Int, atMost k: Int) -> Double {
        (0...k).reduce(0) { $0 + binomialHalf(n, exactly: $1) }
    }
}

/// How two figures compare, beyond the noise or not.
public enum Verdict: String, Codable, Sendable {
    /// The second is lower, and their intervals do not overlap.
    case lower
    /// The second is higher, and their intervals do not overlap.
    case higher
    /// The intervals overlap: no measurable difference.
    case noDifference = "no measurable difference"
    /// One of the two has no interval (a single slice): how far apart they are is shown, but
    /// whether that is beyond the noise is not known.
    case noInterval = "not judged: no interval"

    public init(from old: Estimate, to new: Estimate) {
        if !old.hasInterval || !new.hasInterval {
            self = .noInterval
        } else if old.overlaps(new) {
            self = .noDifference
        } else {
            self = new.median < old.median ? .lower : .higher
        }
    }
}

/// One figure of two runs side by side.
public struct Change: Sendable {
    public let figure: String
    public let old: Estimate
    public let new: Estimate
    public var verdict: Verdict { Verdict(from: old, to: new) }
    /// The change of the median, in percent of the old one.
    public var percent: Double { old.median == 0 ? 0 : (new.median - old.median) / old.median * 100 }

    public init(figure: String, old: Estimate, new: Estimate) {
        self.figure = figure
        self.old = old
        self.new = new
    }

    /// Worse (higher: every compared figure is a cost) beyond the noise by more than `percent`;
    /// never without an interval on both sides.
    public func isRegression(beyond percent: Double) -> Bool { verdict == .higher && self.percent > percent }
}
