// The files linked in from TimerKit's own Support folder were written inside the TimerKit module.
@_exported import TimerKit
