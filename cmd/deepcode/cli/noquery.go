package cli

import "github.com/deepcode-dev/deepcode/cmd/deepcode/internal/noquery"

// TERM is the real one again as soon as the packages this one imports have
// been initialised, bubbletea's among them (see package noquery); also in
// a test binary, which links this package but never runs main.
func init() { noquery.Restore() }
