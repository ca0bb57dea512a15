import Testing
import TimerKit
import TimerKitURing

@testable import timerkit_bench

/// The bench names each subject as TimerKit names its backend (`TimerBackend.name`), so that one
/// backend has one name in the bench's tables, in BENCHMARKS.md, in a backend's statistics and
/// in the registry's snapshots.
@Suite("Bench subject names")
struct SubjectNameTests {
    /// The name of the backend `make` makes, or that its `unavailable` error gives where the
    /// backend cannot run here.
    static func backendName(_ make: @Sendable (TimerRegistry) throws -> any TimerBackend) throws -> String {
        do {
            let backend = try make(TimerRegistry())
            defer { backend.shutdown() }
            return backend.name
        } catch TimerError.unavailable(let backend, _) {
            return backend
        }
    }

    /// Each TimerKit backend the bench measures, on this machine or not, is named as that backend
    /// names itself, or by that name, a hyphen and its mode (`epoll-pwait2`).
    @Test func eachBackendSubjectHasItsBackendsName() throws {
        let subjects = knownBackends.compactMap { subject in subject.make.map { (subject.name, $0) } }
        #expect(subjects.count >= 8)
        for (subject, make) in subjects {
            let name = try Self.backendName(make)
            #expect(subject == name || subject.hasPrefix(name + "-"), "the bench's \(subject) is TimerKit's \(name)")
        }
        // The mode's subject keeps its backend's name whole.
        #expect(knownBackends.map(\.name).contains("epoll-pwait2"))
    }

    /// A raw baseline of a mechanism a TimerKit backend wraps is named after that backend:
    /// its name and `-raw`.
    @Test func aRawBaselineIsNamedAfterTheBackendOfItsMechanism() throws {
        #expect(URingRawFanout.name == "\(try Self.backendName { try IOURingBackend(registry: $0) })-raw")
        let raw = Set(rawBaselines.map(\.name))
        for backend in ["libevent", "dispatch", "nio"] {
            let subject = try #require(knownBackends.first { $0.name == backend }?.make)
            #expect(raw.contains("\(try Self.backendName(subject))-raw"))
        }
    }

    /// Where a backend cannot run, the bench says why under the subject's name.
    @Test func whatCannotRunIsNamedAsItsSubject() {
        let names = Set(knownBackends.map(\.name) + [URingRawFanout.name, PWait2RawFanout.name])
        #expect(Set(unavailableBackends.keys).isSubset(of: names))
    }
}
