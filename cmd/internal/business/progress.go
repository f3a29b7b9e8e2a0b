package business

import (
	"fmt"
	"time"
)

// SpinnerFrames are the frames of a running turn's spinner (the exec
// status line's and the TUI's).
var SpinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// Elapsed is a duration as the status lines show it: 7s, 1m05s, 1h02m.
func Elapsed(d time.Duration) string {
	sec := int(d / time.Second)
	switch {
	case sec < 60:
		return fmt.Sprintf("%ds", sec)
	case sec < 3600:
		return fmt.Sprintf("%dm%02ds", sec/60, sec%60)
	default:
		return fmt.Sprintf("%dh%02dm", sec/3600, sec%3600/60)
	}
}
