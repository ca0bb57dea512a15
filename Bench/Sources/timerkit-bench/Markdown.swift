import ArgumentParser
import BenchStatistics
import Foundation

/// `markdown RUN.json`: BENCHMARKS.md and the README's summary, both rendered from one saved run,
/// so that no figure in either is copied by hand. `make demo` writes them; `make test` renders
/// them again from the committed run and fails if either differs (`--check`).
struct RenderMarkdown: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "markdown",
        abstract: "Renders BENCHMARKS.md and the README's comparison summary from a run saved with --json.")

    @Argument(help: "The run's JSON (timerkit-bench --json > BENCHMARKS.json).")
    var saved: String

    @Option(help: "The Markdown file with every finding and table of the run.")
    var output = "BENCHMARKS.md"

    @Option(help: "The README whose block between the benchmarks-summary markers gets the run's summary.")
    var readme = "README.md"

    @Flag(help: "Write nothing: exit 1 if either file differs from what the run renders.")
    var check = false

    func run() throws {
        let report: BenchReport
        do {
            report = try BenchReport.load(from: saved)
        } catch {
            throw ValidationError("cannot read the run '\(saved)': \(error)")
        }
        let benchmarks = report.markdown(runFile: (saved as NSString).lastPathComponent)
        let readmeText = try String(contentsOfFile: readme, encoding: .utf8)
        guard let start = readmeText.range(of: summaryStart),
            let end = readmeText.range(of: summaryEnd, range: start.upperBound..<readmeText.endIndex)
        else {
            throw ValidationError("'\(readme)' has no block between '\(summaryStart)' and '\(summaryEnd)'")
        }
        let newReadme =
            String(readmeText[..<start.upperBound]) + "\n" + report.readmeSummary(benchmarksFile: (output as NSString).lastPathComponent)
            + String(readmeText[end.lowerBound...])
        if check {
            let current = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            var stale: [String] = []
            if current != benchmarks { stale.append(output) }
            if readmeText != newReadme { stale.append("\(readme)'s summary") }
            guard stale.isEmpty else {
                throw ValidationError(
                    "\(stale.joined(separator: " and ")) differ from what '\(saved)' renders: run `make demo`, or render them again")
            }
            print("markdown: \(output) and \(readme)'s summary are what '\(saved)' renders")
            return
        }
        try benchmarks.write(toFile: output, atomically: true, encoding: .utf8)
        try newReadme.write(toFile: readme, atomically: true, encoding: .utf8)
    }
}

let summaryStart = "<!-- benchmarks-summary: written by `make demo` (timerkit-bench markdown); do not edit -->"
let summaryEnd = "<!-- benchmarks-summary: end -->"

extension BenchReport {
    /// The command that made the run, as a shell would take it.
    var command: String {
        (["timerkit-bench"] + (arguments ?? ["(arguments not recorded)"])).joined(separator: " ")
    }

    /// Where and when the run was made, in one sentence.
    var provenance: String {
        "\(machine.date), on \(machine.cpu) (\(machine.cores) cores), Linux \(machine.kernel), clock source \(machine.clockSource), "
            + "\(machine.build) build, \(machine.compiler), load average \(format(machine.loadAverageBefore)) → "
            + "\(format(machine.loadAverageAfter)), a SCHED_FIFO request got \(machine.realtimePriority)"
    }

    /// BENCHMARKS.md: the run's provenance, its findings and every table.
    func markdown(runFile: String) -> String {
        var out = "# Benchmarks\n\n"
        out += "Rendered by `timerkit-bench markdown` from the run saved in `\(runFile)`: `\(command)`, \(provenance).\n\n"
        out += "Do not edit: `make demo` runs the bench again, saves the run and renders this file and the README's\n"
        out += "summary from it, and `make test` checks that both are what `\(runFile)` renders. The same run's\n"
        out += "`timerkit-report.html` (not committed) draws every figure with its interval.\n\n"
        out += "Each scenario that compares backends runs in interleaved rounds, each round giving every\n"
        out += "backend one slice in a rotated order; each figure's 95 % interval comes from its slices, and\n"
        out += "two backends are ranked only where their intervals do not overlap.\n\n"
        out += "## Which backend when\n\n"
        out += summary().map { "- \($0.text)\n" }.joined()
        out += "\n## The tables\n\n```text\n" + table().trimmingCharacters(in: .newlines) + "\n```\n"
        return out
    }

    /// The README's summary: one line per figure compared, with the run it comes from.
    func readmeSummary(benchmarksFile: String) -> String {
        var out = "From the run `make demo` saved last (`\(command)`, \(machine.date), \(machine.cpu), \(machine.cores) cores, "
        out +=
            "Linux \(machine.kernel), \(machine.build) build). The lowest median of each figure, with its 95 % interval, and the backends above it\n"
        out +=
            "beyond the noise; every other backend's interval overlaps it. All findings and tables: [\(benchmarksFile)](\(benchmarksFile)).\n\n"
        for chart in intervalCharts() where chart.id != "drift" && chart.id != "display" {
            let contenders = chart.rows.filter {
                $0.label != "floor" && !$0.label.hasSuffix(selfCheckSuffix) && $0.estimate.slices.count > 1
            }
            guard contenders.count > 1, let best = contenders.min(by: { $0.estimate.median < $1.estimate.median }) else { continue }
            let above = contenders.filter { $0.label != best.label && Verdict(from: best.estimate, to: $0.estimate) == .higher }
            out += "- \(chart.title): \(best.label), \(interval(best.estimate)) \(chart.unit); "
            out += above.isEmpty ? "none measurably above it.\n" : "measurably above it: \(above.map(\.label).joined(separator: ", ")).\n"
        }
        return out
    }
}
