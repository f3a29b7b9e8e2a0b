// Command echoserver is the bare WebSocket echo of testkit.StartEchoProcess:
// testkit.EchoHandler (gobwas/ws through shared/rpc's connection, without
// JSON-RPC) in a process of its own, so that benchmarks compare a service
// in another process with the transport's round trip between two processes. It listens on the
// network and address of its arguments, prints the address, and serves until
// its standard input closes.
//
// With "relay" and a backend's network and address after them, it is
// instead the bare relay of testkit.StartRelayProcess: each connection gets
// a connection of its own to the backend, and every message goes there and
// its answer back, on the connection's one goroutine.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/deepcode-dev/deepcode/shared/testkit"
)

func main() {
	handler := testkit.EchoHandler()
	switch {
	case len(os.Args) == 6 && os.Args[3] == "relay":
		handler = testkit.RelayHandler(os.Args[4], os.Args[5])
	case len(os.Args) != 3:
		fmt.Fprintln(os.Stderr, "usage: echoserver unix|tcp ADDRESS [relay unix|tcp BACKEND]")
		os.Exit(2)
	}
	ln, err := net.Listen(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: handler}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println(ln.Addr().String())
	_, _ = os.Stdin.Read(make([]byte, 1))
	_ = srv.Close()
}
