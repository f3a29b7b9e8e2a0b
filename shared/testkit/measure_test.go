package testkit_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// The echo servers the benchmarks compare against must really echo: a
// benchmark's floor that answered anything else would flatter every ratio.
func TestEchoServers(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		for name, start := range map[string]func(testing.TB, string) string{
			"in-process": testkit.StartEcho, "own-process": testkit.StartEchoProcess,
			"relay": func(tb testing.TB, network string) string {
				return testkit.StartRelayProcess(tb, network, "unix", testkit.StartEchoProcess(tb, "unix"))
			},
		} {
			t.Run(network+"/"+name, func(t *testing.T) {
				addr := start(t, network)
				conn, err := rpc.Dial(context.Background(), rpc.DialOptions{Network: network, Address: addr, Path: "/"})
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(rpc.CloseNormal, "")
				for _, msg := range [][]byte{[]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`), bytes.Repeat([]byte("a"), 64<<10)} {
					if err := conn.WriteMessages([][]byte{msg}); err != nil {
						t.Fatal(err)
					}
					got, err := conn.ReadMessage()
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, msg) {
						t.Fatalf("echoed %d bytes %.40q, sent %d bytes %.40q", len(got), got, len(msg), msg)
					}
				}
				echo := testkit.DialEcho(t, network, addr)
				echo([]byte("x")) // DialEcho's own round trip reports failures with t.Error
			})
		}
	}
}
