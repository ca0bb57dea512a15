/// Two runs saved with `--json`, figure by figure: what `timerkit-bench compare` shows.
public struct Comparison: Sendable {
    /// Every figure both runs have, by name. A figure with no interval in one run or both (a
    /// single slice) is there too, with the change of its value, and `Verdict.noInterval`.
    public let changes: [Change]
    /// The figures of the old run that the new one does not have: not compared.
    public let onlyInOld: [String]
    /// The figures of the new run that the old one does not have: not compared.
    public let onlyInNew: [String]

    /// Why two runs cannot be compared, naming what each holds.
    public enum Failure: Error, Equatable, CustomStringConvertible {
        /// The run at `path` holds no figure compare reads; `scenarios` are the ones it has.
        case noFigure(path: String, scenarios: [String])
        /// Both runs hold figures, but none by the same name.
        case noFigureInCommon(old: String, oldFigures: [String], new: String, newFigures: [String])

        public var description: String {
            switch self {
            case .noFigure(let path, let scenarios):
                let compared = scenarios.filter { SavedRun.comparedScenarios.contains($0) }
                let why =
                    if scenarios.isEmpty {
                        "it has no results"
                    } else if compared.isEmpty {
                        "its results are \(scenarios.joined(separator: ", ")), and compare reads \(SavedRun.comparedScenarios.joined(separator: ", "))"
                    } else {
                        "its \(compared.joined(separator: ", ")) results hold no estimate with slices"
                    }
                return "'\(path)' has no figure to compare: \(why)"
            case .noFigureInCommon(let old, let oldFigures, let new, let newFigures):
                return
                    "no figure is in both runs: '\(old)' has \(Self.list(oldFigures)), '\(new)' has \(Self.list(newFigures)) (run the same scenarios, backends and --timers in both)"
            }
        }

        private static func list(_ names: [String]) -> String {
            let shown = names.prefix(3).joined(separator: "; ")
            return "\(names.count) (\(shown)\(names.count > 3 ? "; …" : ""))"
        }
    }

    /// Sets the runs side by side; `oldPath` and `newPath` name them in a failure.
    public init(old: SavedRun, at oldPath: String, new: SavedRun, at newPath: String) throws(Failure) {
        if old.figures.isEmpty { throw .noFigure(path: oldPath, scenarios: old.scenarios) }
        if new.figures.isEmpty { throw .noFigure(path: newPath, scenarios: new.scenarios) }
        changes = old.figures.keys.sorted().compactMap { figure in
            guard let was = old.figures[figure], let now = new.figures[figure] else { return nil }
            return Change(figure: figure, old: was, new: now)
        }
        onlyInOld = old.figures.keys.filter { new.figures[$0] == nil }.sorted()
        onlyInNew = new.figures.keys.filter { old.figures[$0] == nil }.sorted()
        if changes.isEmpty {
            throw .noFigureInCommon(
                old: oldPath, oldFigures: old.figures.keys.sorted(), new: newPath, newFigures: new.figures.keys.sorted())
        }
    }

    /// The changes shown but not judged: a single slice in one run or both gives no interval.
    public var unjudged: [Change] { changes.filter { $0.verdict == .noInterval } }
}
