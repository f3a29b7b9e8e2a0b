// Command barestatusverified is barestatus with the one step a correct
// client may not skip: before the credential is sent, the server proves it
// knows the token (GET /control/identity with a fresh challenge, answered
// with an HMAC-SHA256 proof), on the connection that then carries the
// status request. It is the floor of `deepcode service status` for a
// program that checks whom it talks to, as deepcode does: standard
// library only, no flags, no configuration, no error handling beyond a
// panic. BenchmarkServiceStatus builds and times it beside barestatus.
package main

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"os"
	"strconv"
	"strings"
)

// proofContext is localauth's domain separation string.
const proofContext = "deepcode-identity-v1"

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
	raw, err := os.ReadFile(os.Args[2])
	if err != nil {
		panic(err)
	}
	token := strings.TrimSpace(string(raw))
	c, err := net.Dial("unix", inst.Sockets["manager"])
	if err != nil {
		panic(err)
	}
	r := bufio.NewReader(c)
	nonce := make([]byte, 32)
	if _, err := rand.Read(nonce); err != nil {
		panic(err)
	}
	challenge := hex.EncodeToString(nonce)
	fmt.Fprintf(c, "GET /control/identity?challenge=%s HTTP/1.1\r\nHost: localhost\r\n\r\n", challenge)
	var id struct {
		InstanceID string `json:"instanceId"`
		Proof      string `json:"proof"`
	}
	if err := json.Unmarshal(answer(r), &id); err != nil {
		panic(err)
	}
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(proofContext))
	m.Write([]byte{0})
	m.Write([]byte(id.InstanceID))
	m.Write([]byte{0})
	m.Write([]byte(challenge))
	if !hmac.Equal([]byte(hex.EncodeToString(m.Sum(nil))), []byte(id.Proof)) {
		panic("the server did not prove it knows the token")
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"status"}`
	fmt.Fprintf(c, "POST /control/rpc HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\nX-DeepCode-Instance: %s\r\nContent-Length: %d\r\n\r\n%s",
		token, id.InstanceID, len(body), body)
	var res struct {
		Result map[string]any `json:"result"`
	}
	out := answer(r)
	if err := json.Unmarshal(out, &res); err != nil || res.Result == nil {
		panic(string(out))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(res.Result)
}

// answer reads one HTTP answer with a Content-Length and returns its body.
func answer(r *bufio.Reader) []byte {
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
	return out
}
