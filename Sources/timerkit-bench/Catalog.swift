import TimerKit

/// A backend the bench can run: how to make one, and which scenarios it makes sense in.
struct BenchBackend: Sendable {
    let name: String
    /// Virtual-time backends have no real latency: they appear in `throughput` only.
    let realTime: Bool
    let make: @Sendable (TimerRegistry) throws -> any TimerBackend
}

/// Every backend, in report order. A new backend joins the comparison by adding itself here.
let allBackends: [BenchBackend] = [
    BenchBackend(name: "dispatch", realTime: true) { DispatchBackend(registry: $0) },
    BenchBackend(name: "manual", realTime: false) { ManualBackend(registry: $0) },
]
