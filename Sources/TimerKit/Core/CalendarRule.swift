import Foundation

/// The dates of a calendar schedule (`TimerSchedule.calendar(matching:in:count:)`): the next
/// date after an instant that a calendar finds matching some components. A class, so that a
/// schedule holds one reference to it: its components and calendar are hundreds of bytes,
/// which every copy of every schedule would otherwise copy.
final class CalendarRule: Sendable {
    let components: DateComponents
    let calendar: Calendar

    init(components: DateComponents, calendar: Calendar) {
        self.components = components
        self.calendar = calendar
    }

    /// The first matching date after `instant` (ns since 1970), in ns since 1970; nil when no
    /// later date matches.
    ///
    /// A time of day that a daylight-saving change skips gives the first moment after the gap
    /// (`.nextTime`); but a day that does not exist (29 February in other years, 30 February)
    /// is never moved to another day: those dates are matched strictly.
    func next(after instant: UInt64) -> UInt64? {
        let after = Date(nanosecondsSince1970: instant)
        var found = calendar.nextDate(
            after: after, matching: components, matchingPolicy: .nextTime, repeatedTimePolicy: .first, direction: .forward)
        if let moved = found, !keepsTheDay(moved) {
            found = calendar.nextDate(
                after: after, matching: components, matchingPolicy: .strict, repeatedTimePolicy: .first, direction: .forward)
        }
        guard let date = found else { return nil }
        let next = date.nanosecondsSince1970
        // A date a rounding put at `instant` itself is not after it: look a second further.
        return next > instant ? next : self.next(after: instant.saturatingAdd(1_000_000_000))
    }

    /// Whether `date` is on the day the components ask for (its year, month, day and weekday,
    /// where they give one).
    private func keepsTheDay(_ date: Date) -> Bool {
        let found = calendar.dateComponents([.year, .month, .day, .weekday], from: date)
        for (wanted, got) in [(components.year, found.year), (components.month, found.month), (components.day, found.day)] {
            if let wanted, wanted != got { return false }
        }
        if let weekday = components.weekday, weekday != found.weekday { return false }
        return true
    }
}
