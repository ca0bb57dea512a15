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
            contentsOf: Self.root.appending(path: "TimerKitNIO/Tests/TimerKitNIOTests/IdleTimeoutExample.swift"), encoding: .utf8)
        let classStart = try #require(article.range(of: "final class IdleTimeoutHandler")).lowerBound
        let blockEnd = try #require(article.range(of: "```", range: classStart..<article.endIndex)).lowerBound
        let shown = article[classStart..<blockEnd].trimmingCharacters(in: .whitespacesAndNewlines)
        let tested = try #require(example.range(of: "final class IdleTimeoutHandler")).lowerBound
        #expect(shown == example[tested...].trimmingCharacters(in: .whitespacesAndNewlines))
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
    /// The "Choosing a backend" article's fallback is the code ArticleFallbackTests runs
    /// (TimerKitURingTests), line for line up to indentation.
    @Test func theChoosingABackendArticleShowsTheTestedFallback() throws {
        let article = try String(
            contentsOf: Self.root.appending(path: "Sources/TimerKit/TimerKit.docc/ChoosingABackend.md"), encoding: .utf8)
        let tests = try String(contentsOf: Self.root.appending(path: "Tests/TimerKitURingTests/URingTests.swift"), encoding: .utf8)
        func lines(_ text: Substring) -> [String] {
            text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        let section = try #require(article.range(of: "## Many timers with deadlines of their own")).upperBound
        let blockStart = try #require(article.range(of: "```swift\n", range: section..<article.endIndex)).upperBound
        let blockEnd = try #require(article.range(of: "```", range: blockStart..<article.endIndex)).lowerBound
        let markerStart = try #require(tests.range(of: "// article: fallback\n")).upperBound
        let markerEnd = try #require(tests.range(of: "// end", range: markerStart..<tests.endIndex)).lowerBound
        #expect(lines(article[blockStart..<blockEnd]) == lines(tests[markerStart..<markerEnd]))
    }
}
