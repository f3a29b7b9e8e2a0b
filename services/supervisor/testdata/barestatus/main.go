// Command barestatus is the least a program can do to answer `deepcode
// service status`: read instance.json and the token (its two arguments),
// send one authenticated status request to manager.sock, print the answer.
// No flags, no configuration, no HMAC challenge, no error handling beyond a
// panic. BenchmarkServiceStatus builds and times it beside the CLI.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"os"
	"strconv"
	"strings"
)

func main() {
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	var inst struct {
		InstanceID string            `json:"instanceId"`
		Sockets    map[string]string `json:"sockets"`
	}
	if err := json.Unmarshal(b, &inst); err != nil {
		panic(err)
	}
	token, err := os.ReadFile(os.Args[2])
	if err != nil {
		panic(err)
	}
	c, err := net.Dial("unix", inst.Sockets["manager"])
	if err != nil {
		panic(err)
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"status"}`
	fmt.Fprintf(c, "POST /control/rpc HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\nX-DeepCode-Instance: %s\r\nContent-Length: %d\r\n\r\n%s",
		strings.TrimSpace(string(token)), inst.InstanceID, len(body), body)
	r := bufio.NewReader(c)
	tp := textproto.NewReader(r)
	if _, err := tp.ReadLine(); err != nil {
		panic(err)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		panic(err)
	}
	n, _ := strconv.Atoi(h.Get("Content-Length"))
	out := make([]byte, n)
	if _, err := io.ReadFull(r, out); err != nil {
		panic(err)
	}
	var answer struct {
		Result map[string]any `json:"result"`
	}
	if err := json.Unmarshal(out, &answer); err != nil || answer.Result == nil {
		panic(string(out))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(answer.Result)
}
