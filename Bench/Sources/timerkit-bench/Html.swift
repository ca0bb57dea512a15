import BenchStatistics
import Foundation

/// A line chart as inline SVG: one polyline per series, optional log axes, a legend.
struct LineChart {
    var title: String
    var xLabel: String
    var yLabel: String
    var logX = false
    var logY = false
    var series: [(name: String, points: [(x: Double, y: Double)])]

    private static let palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"]

    func svg(width: Double = 640, height: Double = 360) -> String {
        let (left, right, top, bottom) = (70.0, 160.0, 36.0, 46.0)
        let all = series.flatMap(\.points).filter { (!logX || $0.x > 0) && (!logY || $0.y > 0) }
        guard let minX = all.map(\.x).min(), let maxX = all.map(\.x).max(),
            let minY = all.map(\.y).min(), let maxY = all.map(\.y).max()
        else { return "" }
        func tx(_ v: Double) -> Double { logX ? log10(max(v, 1e-9)) : v }
        func ty(_ v: Double) -> Double { logY ? log10(max(v, 1e-9)) : v }
        let (x0, x1) = (tx(minX), max(tx(maxX), tx(minX) + 1e-9))
        let (y0, y1) = (logY ? ty(minY) : min(0, minY), max(ty(maxY), ty(minY) + 1e-9))
        let plotW = width - left - right
        let plotH = height - top - bottom
        func px(_ v: Double) -> Double { left + (tx(v) - x0) / (x1 - x0) * plotW }
        func py(_ v: Double) -> Double { top + plotH - (ty(v) - y0) / (y1 - y0) * plotH }
        var out =
            "<svg xmlns='http://www.w3.org/2000/svg' width='\(Int(width))' height='\(Int(height))' font-family='sans-serif' font-size='11'>"
        out += "<text x='\(left)' y='20' font-size='14' font-weight='bold'>\(escape(title))</text>"
        out += "<rect x='\(left)' y='\(top)' width='\(plotW)' height='\(plotH)' fill='none' stroke='#999'/>"
        for tick in ticks(x0, x1, log: logX) {
            let x = left + (tick.position - x0) / (x1 - x0) * plotW
            out += "<line x1='\(x)' y1='\(top)' x2='\(x)' y2='\(top + plotH)' stroke='#eee'/>"
            out += "<text x='\(x)' y='\(top + plotH + 14)' text-anchor='middle'>\(tick.label)</text>"
        }
        for tick in ticks(y0, y1, log: logY) {
            let y = top + plotH - (tick.position - y0) / (y1 - y0) * plotH
            out += "<line x1='\(left)' y1='\(y)' x2='\(left + plotW)' y2='\(y)' stroke='#eee'/>"
            out += "<text x='\(left - 6)' y='\(y + 4)' text-anchor='end'>\(tick.label)</text>"
        }
        out += "<text x='\(left + plotW / 2)' y='\(height - 8)' text-anchor='middle'>\(escape(xLabel))</text>"
        out += "<text transform='translate(16 \(top + plotH / 2)) rotate(-90)' text-anchor='middle'>\(escape(yLabel))</text>"
        for (index, line) in series.enumerated() {
            let color = Self.palette[index % Self.palette.count]
            let points = line.points.filter { (!logX || $0.x > 0) && (!logY || $0.y > 0) }
                .map { "\(px($0.x)),\(py($0.y))" }.joined(separator: " ")
            out += "<polyline fill='none' stroke='\(color)' stroke-width='2' points='\(points)'/>"
            let ly = top + 10 + Double(index) * 16
            out += "<line x1='\(left + plotW + 12)' y1='\(ly)' x2='\(left + plotW + 32)' y2='\(ly)' stroke='\(color)' stroke-width='3'/>"
            out += "<text x='\(left + plotW + 38)' y='\(ly + 4)'>\(escape(line.name))</text>"
        }
        return out + "</svg>"
    }

    private func ticks(_ low: Double, _ high: Double, log: Bool) -> [(position: Double, label: String)] {
        if log {
            // 1, 2 and 5 per decade when the axis spans few decades, else powers of ten only.
            let factors: [Double] = high - low < 3 ? [1, 2, 5] : [1]
            var positions: [Double] = []
            for decade in stride(from: floor(low), through: ceil(high), by: 1) {
                for factor in factors {
                    let position = log10(factor) + decade
                    if position >= low - 1e-9 && position <= high + 1e-9 { positions.append(position) }
                }
            }
            return positions.map { (position: $0, label: shortNumber(pow(10, $0))) }
        }
        let step = niceStep((high - low) / 5)
        return stride(from: ceil(low / step) * step, through: high, by: step).map { ($0, shortNumber($0)) }
    }

    private func niceStep(_ raw: Double) -> Double {
        let magnitude = pow(10, floor(log10(max(raw, 1e-9))))
        for factor in [1.0, 2, 5, 10] where raw <= factor * magnitude { return factor * magnitude }
        return 10 * magnitude
    }
}

func shortNumber(_ value: Double) -> String {
    switch abs(value) {
    case 1_000_000...: return String(format: "%gM", value / 1_000_000)
    case 1_000...: return String(format: "%gk", value / 1_000)
    default: return String(format: "%g", value)
    }
}

func escape(_ text: String) -> String {
    text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
        .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "'", with: "&#39;")
}

extension BenchReport {
    /// A self-contained page: the summary, the charts and the full tables.
    func html() -> String {
        let latency = results.compactMap { if case let .latency(r) = $0 { r } else { nil } }
        let throughput = results.compactMap { if case let .throughput(r) = $0 { r } else { nil } }
        var body = "<h1>TimerKit backend comparison</h1>"
        body += "<p>\(escape(machine.cpu)), \(machine.cores) cores, Linux \(escape(machine.kernel)), \(escape(machine.date)). "
        body += "Compare backends inside one run; p50 repeats between runs on a noisy machine, p99 does not.</p>"
        body += "<h2>Which backend when</h2><ul>" + summary().map { "<li>\(escape($0))</li>" }.joined() + "</ul>"
        if !latency.isEmpty {
            let chart = LineChart(
                title: "Lateness CDF, \(format(latency[0].intervalUs)) µs repeating timer",
                xLabel: "lateness (µs, log)", yLabel: "percentile", logX: true,
                series: latency.map { r in (r.backend, r.cdfUs.map { (x: $0[1], y: $0[0]) }) })
            body += chart.svg()
        }
        let sizes = Set(throughput.map(\.timers))
        if sizes.count > 1 {
            let names = throughput.map(\.backend).reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
            for (label, value) in [
                ("schedule", \ThroughputResult.scheduleNs), ("reset", \ThroughputResult.resetNs), ("cancel", \ThroughputResult.cancelNs),
            ] {
                let chart = LineChart(
                    title: "\(label) cost vs live timers", xLabel: "timers (log)", yLabel: "ns per \(label) (median, log)",
                    logX: true, logY: true,
                    series: names.map { name in
                        (
                            name,
                            throughput.filter { $0.backend == name }.sorted { $0.timers < $1.timers }
                                .map { (x: Double($0.timers), y: $0[keyPath: value]) }
                        )
                    })
                body += chart.svg()
            }
        }
        body += "<h2>All figures</h2><pre>\(escape(table()))</pre>"
        return """
            <!doctype html><html><head><meta charset="utf-8"><title>TimerKit bench</title>
            <style>body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}svg{display:block;margin:1em 0}pre{font-size:12px;background:#f6f6f6;padding:1em;overflow-x:auto}</style>
            </head><body>\(body)</body></html>
            """
    }

    /// How the leader of a figure stands against the others: ranked only beyond the noise.
    func verdicts(_ estimate: Estimate, against others: [(String, Estimate)]) -> String {
        let ahead = others.filter { Verdict(from: estimate, to: $0.1) == .higher }.map(\.0)
        let even = others.filter { Verdict(from: estimate, to: $0.1) == .noDifference }.map(\.0)
        var text = ""
        if !ahead.isEmpty { text += ", ahead of \(ahead.joined(separator: ", ")) beyond the noise" }
        if !even.isEmpty { text += "; no measurable difference from \(even.joined(separator: ", "))" }
        return text
    }

    /// Plain sentences drawn from the figures of this run; a backend is ranked above another
    /// only where their 95 % intervals do not overlap.
    func summary() -> [String] {
        var lines: [String] = []
        let latency = results.compactMap { if case let .latency(r) = $0 { r } else { nil } }
        let floor = latency.first { $0.backend == "floor" }?.latenessUs.p50
        let backends = latency.filter { $0.backend != "floor" && !$0.backend.hasSuffix(selfCheckSuffix) }
            .sorted { $0.p50Us.median < $1.p50Us.median }
        if let best = backends.first {
            var line = "Lowest latency: \(best.backend) (p50 of its slices \(interval(best.p50Us)) µs, 95 %"
            if let floor { line += "; \(String(format: "%+.1f", best.latenessUs.p50 - floor)) µs from the bare-timerfd floor" }
            lines.append(line + ")" + verdicts(best.p50Us, against: backends.dropFirst().map { ($0.backend, $0.p50Us) }) + ".")
        }
        let throughput = results.compactMap { if case let .throughput(r) = $0 { r } else { nil } }
        if let largest = throughput.map(\.timers).max() {
            let atLargest = throughput.filter { $0.timers == largest }.sorted { $0.cancelNsEstimate.median < $1.cancelNsEstimate.median }
            if let fastest = atLargest.first {
                lines.append(
                    "At \(largest) live timers, cancel is cheapest with \(fastest.backend) (\(interval(fastest.cancelNsEstimate)) ns over its batches)"
                        + verdicts(fastest.cancelNsEstimate, against: atLargest.dropFirst().map { ($0.backend, $0.cancelNsEstimate) })
                        + "; TimerKit backends share one scheduler, so they scale alike."
                )
            }
            if let foundation = throughput.filter({ $0.backend == "foundation-raw" }).max(by: { $0.timers < $1.timers }),
                let runloop = throughput.first(where: { $0.backend == "runloop" && $0.timers == foundation.timers })
            {
                lines.append(
                    "At \(foundation.timers) timers, one Foundation Timer per timer costs \(format(foundation.cancelNs)) ns per cancel (invalidate is O(n)); the RunLoop backend \(format(runloop.cancelNs)) ns."
                )
            }
        }
        let idle = results.compactMap { if case let .idle(r) = $0 { r } else { nil } }
        if !idle.isEmpty {
            lines.append(
                "Idle wake-ups above the no-backend baseline (goal 0): "
                    + idle.map { "\($0.backend) \($0.wakeupsAboveBaseline)" }.joined(separator: ", ") + ".")
        }
        let display = results.compactMap { if case let .display(r) = $0 { r } else { nil } }.filter { $0.backend == "display" }
        for r in display {
            lines.append(
                "DisplayLink at \(r.refreshHz) Hz: \(r.dropped) dropped of \(r.frames) frames, lateness p50 \(format(r.latenessUs.p50)) µs, thread at \(r.priority)."
            )
        }
        lines.append(
            "Choose by the loop your code already runs on: epoll or libevent for the lowest latency and no idle wake-ups, Dispatch for queue-based code, RunLoop for Foundation code and run-loop modes, Manual in tests."
        )
        return lines
    }
}
