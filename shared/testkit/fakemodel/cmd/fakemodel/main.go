// Command fakemodel runs the loopback fake model server of package
// fakemodel and prints its base URL, for trying agent runtimes by hand.
package main

import (
	"fmt"
	"os"
	"os/signal"

	"github.com/deepcode-dev/deepcode/shared/testkit/fakemodel"
)

func main() {
	s, err := fakemodel.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakemodel:", err)
		os.Exit(1)
	}
	fmt.Println(s.URL)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt)
	<-ch
	s.Close()
}
