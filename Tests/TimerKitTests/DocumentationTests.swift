import Foundation
import Testing

/// Code shown in the documentation that the test suite also runs must not drift from it.
@Suite("Documentation")
struct DocumentationTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The "Writing a backend" article shows `PumpedBackend`, which the conformance suite runs
    /// as a backend configuration: the article's code block must be that file's code.
    @Test func theWritingABackendArticleShowsTheTestedExample() throws {
        let article = try String(
            contentsOf: Self.root.appending(path: "Sources/TimerKit/TimerKit.docc/WritingABackend.md"), encoding: .utf8)
        let example = try String(contentsOf: Self.root.appending(path: "Tests/TimerKitTestSupport/PumpedBackend.swift"), encoding: .utf8)
        let afterHeading = try #require(article.range(of: "## An example")).upperBound
        let blockStart = try #require(article.range(of: "```swift\n", range: afterHeading..<article.endIndex)).upperBound
        let blockEnd = try #require(article.range(of: "```", range: blockStart..<article.endIndex)).lowerBound
        let shown = String(article[blockStart..<blockEnd]).replacingOccurrences(of: "\n\n\n", with: "\n\n")
        // The file's two-line header comment says why it exists; the article leaves it out.
        let code = example.split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("// The example backend") && !$0.hasPrefix("// runs it as one more") }
            .joined(separator: "\n")
            .replacingOccurrences(of: "\n\n\n", with: "\n\n")
        #expect(shown.trimmingCharacters(in: .whitespacesAndNewlines) == code.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}

extension DocumentationTests {
    /// The SwiftNIO article shows the idle-timeout handler that TimerKitNIO's tests run on an
    /// `EmbeddedChannel`: the article's first code block with a class must be that class.
    @Test func theSwiftNIOArticleShowsTheTestedIdleTimeoutHandler() throws {
        let article = try String(
            contentsOf: Self.root.appending(path: "Sources/TimerKit/TimerKit.docc/UsingTimerKitOnSwiftNIO.md"), encoding: .utf8)
        let example = try String(
            contentsOf: Self.root.appending(path: "Tests/TimerKitNIOTests/IdleTimeoutExample.swift"), encoding: .utf8)
        let classStart = try #require(article.range(of: "final class IdleTimeoutHandler")).lowerBound
        let blockEnd = try #require(article.range(of: "```", range: classStart..<article.endIndex)).lowerBound
        let shown = article[classStart..<blockEnd].trimmingCharacters(in: .whitespacesAndNewlines)
        // The tested file is inside `#if NIO` (its trait), so its code is indented one level.
        let tested = try #require(example.range(of: "final class IdleTimeoutHandler")).lowerBound
        let testedEnd = try #require(example.range(of: "#endif", range: tested..<example.endIndex)).lowerBound
        let code = example[tested..<testedEnd].split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("    ") ? $0.dropFirst(4) : $0 }
            .joined(separator: "\n")
        #expect(shown == code.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}

extension DocumentationTests {
    /// The helpers article's code blocks are the blocks between `// article:` markers in
    /// HelperArticleTests.swift, which compiles and runs them.
    @Test func theHelpersArticleShowsTheTestedExamples() throws {
        let article = try String(contentsOf: Self.root.appending(path: "Sources/TimerKit/TimerKit.docc/Helpers.md"), encoding: .utf8)
        let examples = try String(contentsOf: Self.root.appending(path: "Tests/TimerKitTests/HelperArticleTests.swift"), encoding: .utf8)
        func blocks(in text: String, from open: String, to close: String) -> [String] {
            text.components(separatedBy: open).dropFirst().compactMap { part in
                part.components(separatedBy: close).first.map { block in
                    // Past the marker's own line (its name), up to the closing marker.
                    let body = open.hasSuffix("\n") ? block : String(block.drop { $0 != "\n" })
                    return body.trimmingCharacters(in: .whitespacesAndNewlines)
                }
            }
        }
        let shown = blocks(in: article, from: "```swift\n", to: "```")
        let tested = blocks(in: examples, from: "// article:", to: "// end")
        #expect(shown.count == 7)
        #expect(shown.sorted() == tested.sorted(), "the same blocks, in any order")
    }
}

extension DocumentationTests {
    /// The README's tour is the code ReadmeTourTests runs: the same lines, and imports that file has.
    @Test func theReadmeTourIsTheTestedCode() throws {
        let readme = try String(contentsOf: Self.root.appending(path: "README.md"), encoding: .utf8)
        let example = try String(contentsOf: Self.root.appending(path: "Tests/TimerKitTests/ReadmeTourTests.swift"), encoding: .utf8)
        let section = try #require(readme.range(of: "\n## A tour\n")).upperBound
        let blockStart = try #require(readme.range(of: "```swift\n", range: section..<readme.endIndex)).upperBound
        let blockEnd = try #require(readme.range(of: "```", range: blockStart..<readme.endIndex)).lowerBound
        let shown = readme[blockStart..<blockEnd].split(separator: "\n", omittingEmptySubsequences: false)
        let imports = shown.filter { $0.hasPrefix("import ") }
        let shownCode = shown.filter { !$0.hasPrefix("import ") }.joined(separator: "\n")
        let testedStart = try #require(example.range(of: "// readme: tour\n")).upperBound
        let testedEnd = try #require(example.range(of: "// end", range: testedStart..<example.endIndex)).lowerBound
        // The tested code sits in a test function, two levels in.
        let testedCode = example[testedStart..<testedEnd].split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? $0.dropFirst(8) : $0 }
            .joined(separator: "\n")
        #expect(shownCode.trimmingCharacters(in: .whitespacesAndNewlines) == testedCode.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(!imports.isEmpty && imports.allSatisfy { example.contains("\n\($0)\n") || example.hasPrefix("\($0)\n") })
    }
}

extension DocumentationTests {
    /// The millions-of-timers article's code blocks are the blocks between `// article:` markers
    /// in MillionsArticleTests.swift, which compiles and runs them; the example it names keeps
    /// its idle timeouts by key.
    @Test func theMillionsArticleShowsTheTestedCodeAndNamesAnExampleThatUsesKeys() throws {
        let docs = Self.root.appending(path: "Sources/TimerKit/TimerKit.docc")
        let article = try String(contentsOf: docs.appending(path: "HoldingMillionsOfTimers.md"), encoding: .utf8)
        let code = try String(contentsOf: Self.root.appending(path: "Tests/TimerKitTests/MillionsArticleTests.swift"), encoding: .utf8)
        func blocks(in text: String, from open: String, to close: String) -> [String] {
            text.components(separatedBy: open).dropFirst().compactMap { part in
                part.components(separatedBy: close).first.map { block in
                    let body = open.hasSuffix("\n") ? block : String(block.drop { $0 != "\n" })
                    return body.trimmingCharacters(in: .whitespacesAndNewlines)
                }
            }
        }
        let shown = blocks(in: article, from: "```swift\n", to: "```")
        #expect(shown.count == 2)
        #expect(shown == blocks(in: code, from: "// article:", to: "// end"))
        #expect(article.contains("`IdleTimeoutServer` example"))
        let server = try String(
            contentsOf: Self.root.appending(path: "Examples/IdleTimeoutServer/Sources/IdleTimeoutServer/Server.swift"), encoding: .utf8)
        #expect(server.contains("TimerCallback") && server.contains("private var timer: TimerKey?"))
    }
}

extension DocumentationTests {
    /// The "Choosing a backend" article's fallback is the code ArticleFallbackTests runs
    /// (TimerKitURingTests), line for line up to indentation.
    /// "Choosing a backend" and the TimerKitURing article show the best loop in one call as
    /// `BestLoopTests` runs it.
    @Test func theArticlesShowTheTestedBestLoop() throws {
        let tests = try String(contentsOf: Self.root.appending(path: "Tests/TimerKitURingTests/URingTests.swift"), encoding: .utf8)
        func lines(_ text: Substring) -> [String] {
            text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        let markerStart = try #require(tests.range(of: "// article: best loop\n")).upperBound
        let markerEnd = try #require(tests.range(of: "// end", range: markerStart..<tests.endIndex)).lowerBound
        let tested = lines(tests[markerStart..<markerEnd])
        for (path, after) in [
            ("Sources/TimerKit/TimerKit.docc/ChoosingABackend.md", "## Many timers with deadlines of their own"),
            ("Sources/TimerKitURing/TimerKitURing.docc/TimerKitURing.md", "says so without making a backend."),
        ] {
            let article = try String(contentsOf: Self.root.appending(path: path), encoding: .utf8)
            let section = try #require(article.range(of: after)).upperBound
            let blockStart = try #require(article.range(of: "```swift\n", range: section..<article.endIndex)).upperBound
            let blockEnd = try #require(article.range(of: "```", range: blockStart..<article.endIndex)).lowerBound
            #expect(lines(article[blockStart..<blockEnd]) == tested, "\(path)")
        }
    }
}
