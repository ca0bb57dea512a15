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

}

/// A round step for an axis of about five ticks: 1, 2 or 5 times a power of ten.
func niceStep(_ raw: Double) -> Double {
    let magnitude = pow(10, floor(log10(max(raw, 1e-9))))
    for factor in [1.0, 2, 5, 10] where raw <= factor * magnitude { return factor * magnitude }
    return 10 * magnitude
}

/// One row per subject: a dot at its median and a bar over its 95 % interval, so that
/// overlapping bars (no measurable difference) are seen at a glance.
struct IntervalChart {
    /// The chart's anchor in the page, which the verdicts link to.
    var id: String
    var title: String
    var unit: String
    var rows: [(label: String, estimate: Estimate)]

    func svg(width: Double = 760) -> String {
        let (left, right, top, rowHeight) = (230.0, 60.0, 36.0, 20.0)
        let height = top + Double(rows.count) * rowHeight + 40
        guard !rows.isEmpty else { return "" }
        // All zero (no idle wake-ups, say) is still a chart: an axis from 0 to 1.
        let highest = rows.map { max($0.estimate.ci95High, $0.estimate.median) }.max() ?? 0
        let high = highest > 0 ? highest : 1
        // Figures that differ by more than 30 times (a raw peer far from the rest) on a log
        // axis, so that the others' bars stay readable.
        let low = rows.map { min($0.estimate.ci95Low, $0.estimate.median) }.filter { $0 > 0 }.min() ?? high
        let logAxis = high / low > 30
        let ticks: [Double]
        let (x0, x1): (Double, Double)
        if logAxis {
            (x0, x1) = (floor(log10(low)), ceil(log10(high)))
            ticks = stride(from: x0, through: x1, by: 1).map { pow(10, $0) }
        } else {
            let step = niceStep(high / 5)
            (x0, x1) = (0, ceil(high / step) * step)
            ticks = Array(stride(from: 0, through: x1, by: step))
        }
        let plotW = width - left - right
        func px(_ v: Double) -> Double {
            let position = logAxis ? log10(max(v, pow(10, x0))) : v
            return left + (position - x0) / (x1 - x0) * plotW
        }
        var out =
            "<svg id='\(id)' xmlns='http://www.w3.org/2000/svg' width='\(Int(width))' height='\(Int(height))' font-family='sans-serif' font-size='11'>"
        out += "<text x='10' y='20' font-size='14' font-weight='bold'>\(escape(title))</text>"
        let bottom = top + Double(rows.count) * rowHeight
        for tick in ticks {
            out += "<line x1='\(px(tick))' y1='\(top)' x2='\(px(tick))' y2='\(bottom)' stroke='#eee'/>"
            out += "<text x='\(px(tick))' y='\(bottom + 14)' text-anchor='middle'>\(shortNumber(tick))</text>"
        }
        let axis = logAxis ? "\(unit), log scale" : unit
        out +=
            "<text x='\(left + plotW / 2)' y='\(bottom + 32)' text-anchor='middle'>\(escape(axis)): median (dot) and 95 % interval (bar)</text>"
        for (index, row) in rows.enumerated() {
            let y = top + Double(index) * rowHeight + rowHeight / 2
            let e = row.estimate
            out += "<text x='\(left - 8)' y='\(y + 4)' text-anchor='end'>\(escape(row.label))</text>"
            if e.slices.count > 1 {
                out +=
                    "<line x1='\(px(e.ci95Low))' y1='\(y)' x2='\(px(e.ci95High))' y2='\(y)' stroke='#1f77b4' stroke-width='6' stroke-opacity='0.35'/>"
                for end in [e.ci95Low, e.ci95High] {
                    out += "<line x1='\(px(end))' y1='\(y - 5)' x2='\(px(end))' y2='\(y + 5)' stroke='#1f77b4'/>"
                }
            }
            out += "<circle cx='\(px(e.median))' cy='\(y)' r='4' fill='#d62728'/>"
            out += "<text x='\(px(max(e.ci95High, e.median)) + 8)' y='\(y + 4)' fill='#555'>\(format(e.median))</text>"
        }
        return out + "</svg>"
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

/// A finding of the run, linked to the chart that shows it.
struct Finding {
    var text: String
    var chart: String?
}

extension BenchReport {
    /// A self-contained page: the findings, a chart for every scenario, and the full tables.
    func html() -> String {
        var body = "<h1>TimerKit backend comparison</h1>"
        body += "<p>\(escape(machine.cpu)), \(machine.cores) cores, Linux \(escape(machine.kernel)), \(escape(machine.date)). "
        body +=
            "Every figure with a bar was measured in interleaved rounds; two figures are ranked only when their 95 % intervals do not overlap.</p>"
        body += "<h2>Which backend when</h2><ul>"
        body += summary().map { finding in
            "<li>\(escape(finding.text))" + (finding.chart.map { " <a href='#\($0)'>(chart)</a>" } ?? "") + "</li>"
        }.joined()
        body += "</ul>"
        for chart in charts() { body += chart }
        body += statisticsPanel()
        body += "<h2>All figures</h2><pre>\(escape(table()))</pre>"
        return """
            <!doctype html><html><head><meta charset="utf-8"><title>TimerKit bench</title>
            <style>body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}svg{display:block;margin:1em 0}pre{font-size:12px;background:#f6f6f6;padding:1em;overflow-x:auto}</style>
            </head><body>\(body)</body></html>
            """
    }

    /// Per backend, what its own `statistics` said during the latency run, and whether that
    /// agrees with the bench's measurement of the same fires.
    func statisticsPanel() -> String {
        let described = results.compactMap { result -> (String, BackendFigures)? in
            guard case let .latency(r) = result, let figures = r.statistics else { return nil }
            return (r.backend, figures)
        }
        guard !described.isEmpty else { return "" }
        var rows = ""
        for (backend, s) in described {
            let agrees = s.agreesWithBench.map { $0 ? "yes" : "no" } ?? "-"
            let cells = [
                backend, "\(s.fires)", format(s.latenessP50Us), format(s.latenessP99Us), format(s.latenessMaxUs), format(s.handlerP50Us),
                format(s.handlerP99Us), String(format: "%.3f", s.busyPercent), "\(s.missed)",
                "\(s.longestHandler) (\(format(s.longestHandlerUs)))", agrees,
            ]
            rows += "<tr>" + cells.map { "<td>\(escape($0))</td>" }.joined() + "</tr>"
            if let agreement = s.agreement { rows += "<tr><td></td><td colspan='10'><small>\(escape(agreement))</small></td></tr>" }
        }
        let header = [
            "backend", "fires", "late p50 µs", "late p99 µs", "late max µs", "handler p50 µs", "handler p99 µs", "busy %", "missed",
            "longest handler (µs)", "agrees with bench",
        ]
        return """
            <h2 id="statistics">What each backend said of itself</h2>
            <p>Each backend's <code>statistics</code> over the latency run's slices: its lateness and handler-time \
            histograms, how busy its loop was, and whether its lateness p50 and p90 lie within a histogram bucket of the \
            bench's own measurement of the same fires.</p>
            <table style="border-collapse:collapse;font-size:13px"><tr>\(header.map { "<th style='text-align:left;padding:2px 6px'>\($0)</th>" }.joined())</tr>\(rows)</table>
            """
    }

    /// The figures with intervals, one chart each, in report order.
    func intervalCharts() -> [IntervalChart] {
        var charts: [IntervalChart] = []
        let latency = results.compactMap { if case let .latency(r) = $0 { r } else { nil } }
        if !latency.isEmpty {
            charts.append(
                IntervalChart(
                    id: "latency", title: "latency: lateness p50 of a repeating \(format(latency[0].intervalUs)) µs timer", unit: "µs",
                    rows: latency.map { ($0.backend, $0.p50Us) }))
        }
        let firstFire = results.compactMap { if case let .firstFire(r) = $0 { r } else { nil } }
        if !firstFire.isEmpty {
            charts.append(
                IntervalChart(
                    id: "first-fire", title: "first-fire: lateness p50 of a fresh 1 ms one-shot", unit: "µs",
                    rows: firstFire.map { ($0.backend, $0.p50Us) }))
        }
        let throughput = results.compactMap { if case let .throughput(r) = $0 { r } else { nil } }
        if let largest = throughput.map(\.timers).max() {
            let rows = throughput.filter { $0.timers == largest }
            for (phase, value) in [
                ("schedule", \ThroughputResult.scheduleNsEstimate), ("reset", \ThroughputResult.resetNsEstimate),
                ("cancel", \ThroughputResult.cancelNsEstimate),
            ] {
                charts.append(
                    IntervalChart(
                        id: "throughput-\(phase)", title: "throughput: \(phase) with \(largest) live timers", unit: "ns per \(phase)",
                        rows: rows.map { ($0.backend, $0[keyPath: value]) }))
            }
        }
        let stalls = results.compactMap { if case let .stalls(r) = $0 { r } else { nil } }
        if let largest = stalls.map(\.timers).max() {
            // Two runs, one figure each operation: dots without bars, as for drift.
            charts.append(
                IntervalChart(
                    id: "stalls", title: "stalls: the longest single operation both runs agree on, \(largest) live timers (no interval)",
                    unit: "µs",
                    rows: stalls.filter { $0.timers == largest }.flatMap { r in
                        r.phases.map { ("\(r.backend) \($0.phase)", Estimate(slices: [$0.recurringMaxNs / 1000])) }
                    }))
        }
        let fanout = results.compactMap { if case let .fanout(r) = $0 { r } else { nil } }
        if !fanout.isEmpty {
            charts.append(
                IntervalChart(
                    id: "fanout", title: "fanout: CPU per fire, \(fanout[0].timers) repeating timers at 100 ms", unit: "ns of CPU per fire",
                    rows: fanout.map { ($0.backend, $0.cpuNsPerFireEstimate) }))
        }
        let idle = results.compactMap { if case let .idle(r) = $0 { r } else { nil } }
        if !idle.isEmpty {
            charts.append(
                IntervalChart(
                    id: "idle", title: "idle: wake-ups with the only timer an hour away (goal 0)",
                    unit: "wake-ups per s above the baseline",
                    rows: idle.map { ($0.backend, $0.wakeupsPerSecondAboveBaseline) }))
        }
        let display = results.compactMap { if case let .display(r) = $0 { r } else { nil } }
        if !display.isEmpty {
            charts.append(
                IntervalChart(
                    id: "display", title: "display: frame lateness p50, DisplayLink against a bare timerfd", unit: "µs",
                    rows: display.map { ("\($0.refreshHz) Hz \($0.backend)", $0.latenessP50Us) }))
        }
        let async = results.compactMap { if case let .async(r) = $0 { r } else { nil } }
        if !async.isEmpty {
            charts.append(
                IntervalChart(
                    id: "async", title: "async: lateness p50 seen by a task on a \(format(async[0].intervalUs)) µs grid", unit: "µs",
                    rows: async.map { ("\($0.backend) \($0.mode) (\($0.executor))", $0.p50Us) }))
        }
        let drift = results.compactMap { if case let .drift(r) = $0 { r } else { nil } }
        if !drift.isEmpty {
            // One run of every backend at once: no rounds, so dots without bars.
            charts.append(
                IntervalChart(
                    id: "drift", title: "drift: lateness p50 of the first and last tenth of one long run (no rounds: no interval)",
                    unit: "µs",
                    rows: drift.flatMap {
                        [
                            ("\($0.backend) first tenth", Estimate(slices: [$0.firstTenthP50Us])),
                            ("\($0.backend) last tenth", Estimate(slices: [$0.lastTenthP50Us])),
                        ]
                    }))
        }
        return charts
    }

    /// Every chart of the page: the figures with intervals, then the distributions.
    func charts() -> [String] {
        var out = intervalCharts().map { $0.svg() }
        let latency = results.compactMap { if case let .latency(r) = $0 { r } else { nil } }
        if !latency.isEmpty {
            let chart = LineChart(
                title: "Lateness CDF, \(format(latency[0].intervalUs)) µs repeating timer",
                xLabel: "lateness (µs, log)", yLabel: "percentile", logX: true,
                series: latency.map { r in (r.backend, r.cdfUs.map { (x: $0[1], y: $0[0]) }) })
            out.append(chart.svg())
        }
        let throughput = results.compactMap { if case let .throughput(r) = $0 { r } else { nil } }
        if Set(throughput.map(\.timers)).count > 1 {
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
                out.append(chart.svg())
            }
        }
        return out
    }

    /// The findings of this run: for each figure with intervals, the subject with the lowest
    /// median and how it stands against each other subject — ahead only where the 95 %
    /// intervals do not overlap, otherwise "no measurable difference". Never from one median.
    func summary() -> [Finding] {
        var findings: [Finding] = []
        // Drift and stalls have no intervals (their rows have one slice, so none contends);
        // display compares each rate with its own floor, below.
        for chart in intervalCharts() where chart.id != "drift" && chart.id != "display" {
            // The floor and a self-check's second label are references, not contenders.
            let contenders = chart.rows.filter {
                $0.label != "floor" && !$0.label.hasSuffix(selfCheckSuffix) && $0.estimate.slices.count > 1
            }
            guard contenders.count > 1, let best = contenders.min(by: { $0.estimate.median < $1.estimate.median }) else { continue }
            let others = contenders.filter { $0.label != best.label }
            let ahead = others.filter { Verdict(from: best.estimate, to: $0.estimate) == .higher }.map(\.label)
            let even = others.filter { Verdict(from: best.estimate, to: $0.estimate) == .noDifference }.map(\.label)
            var text = "\(chart.title) — lowest: \(best.label) (\(interval(best.estimate)) \(chart.unit), \(confidenceText(best.estimate)))"
            if !ahead.isEmpty { text += "; below \(ahead.joined(separator: ", ")) beyond the noise" }
            if !even.isEmpty { text += "; no measurable difference from \(even.joined(separator: ", "))" }
            findings.append(Finding(text: text + ".", chart: chart.id))
        }
        let display = results.compactMap { if case let .display(r) = $0 { r } else { nil } }
        for link in display where link.backend == "display" {
            var text = "DisplayLink at \(link.refreshHz) Hz: \(link.dropped) dropped of \(link.frames) frames, thread at \(link.priority)"
            if let floor = display.first(where: { $0.backend == "floor" && $0.refreshHz == link.refreshHz }),
                link.latenessP50Us.slices.count > 1, floor.latenessP50Us.slices.count > 1
            {
                let verdict: String =
                    switch Verdict(from: floor.latenessP50Us, to: link.latenessP50Us) {
                    case .noDifference: "no measurable difference"
                    case .higher: "later beyond the noise"
                    case .lower: "earlier beyond the noise"
                    case .noInterval: "not judged (no interval)"
                    }
                text +=
                    "; lateness p50 \(interval(link.latenessP50Us)) µs against a bare timerfd's \(interval(floor.latenessP50Us)) µs: \(verdict)"
            }
            findings.append(Finding(text: text + ".", chart: "display"))
        }
        findings.append(
            Finding(
                text:
                    "Where no figure above separates them, choose by the loop your code already runs on: Dispatch for queue-based code, RunLoop for Foundation code and run-loop modes, NIO on a SwiftNIO loop, epoll or libevent for a loop of TimerKit's own, Manual in tests.",
                chart: nil))
        return findings
    }
}

/// "at 97.9 %": how sure an estimate's interval is.
func confidenceText(_ estimate: Estimate) -> String {
    String(format: "95 %% interval at %.1f %%", estimate.confidence * 100)
}
