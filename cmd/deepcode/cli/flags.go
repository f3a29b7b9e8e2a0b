package cli

import (
	"fmt"
	"strconv"
	"time"
)

// seconds is a duration flag that also accepts a plain number of seconds,
// as in `--timeout 60`.
type seconds time.Duration

func (s *seconds) String() string {
	if *s == 0 {
		return ""
	}
	return time.Duration(*s).String()
}

func (s *seconds) Set(v string) error {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n < 0 || n > 86400 {
			return fmt.Errorf("%q: use 0 to 86400 seconds", v)
		}
		*s = seconds(time.Duration(n * float64(time.Second)))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > 24*time.Hour {
		return fmt.Errorf("%q is not a number of seconds or a duration such as 90s", v)
	}
	*s = seconds(d)
	return nil
}

func (s *seconds) Type() string { return "seconds" }
