// Package units holds deepcode's systemd user unit templates (embedded, and
// shipped verbatim by the distribution packages to /usr/lib/systemd/user) and
// renders the per-instance files that `deepcode service install` writes
// beside them: one drop-in per service recording the executable, the
// gateway's port, and the instance's environment file.
//
// Every unit is a template instanced by the database id (paths.DatabaseID),
// so one user can install several databases side by side:
//
//	deepcode@<id>.target                     the instance; WantedBy=default.target
//	deepcode-<svc>@<id>.socket               %t/deepcode/<id>/<svc>.sock, FileDescriptorName=<svc>
//	deepcode-gateway-http@<id>.socket        127.0.0.1:<port>, FileDescriptorName=http
//	deepcode-<svc>@<id>.service              Type=notify, Restart=on-failure
//	%E/deepcode/instances/<id>.env           DEEPCODE_HOME, DEEPCODE_DATABASE, DEEPCODE_PORT, PATH
package units

import (
	"bytes"
	"embed"
	"fmt"
	"github.com/deepcode-dev/deepcode/shared/topology"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

//go:embed deepcode@.target deepcode-*@.service deepcode-*@.socket
var files embed.FS

// PackagedLibexec is where the distribution packages install the service
// binaries; the templates' ExecStart points there.
const PackagedLibexec = "/usr/libexec/deepcode"

// Service is one deepcode service and its socket units.
type Service struct {
	Name string
	// OnDemand services are started by their socket's first connection and
	// exit when idle; the others start with the target.
	OnDemand bool
	// Sockets are the socket units' base names (deepcode-<base>@.socket) and
	// FDName the matching FileDescriptorName (LISTEN_FDNAMES).
	Sockets []Socket
}

// Socket is one socket unit.
type Socket struct {
	Unit   string // base name: "gateway-http" for deepcode-gateway-http@.socket
	FDName string
	// File is the socket's file name in the runtime directory ("" for TCP).
	File string
}

// Services lists every service in start order, from the one table
// (shared/topology) that shared/activation and services/supervisor read too.
var Services = unitServices()

func unitServices() []Service {
	var out []Service
	for _, ts := range topology.Services {
		svc := Service{Name: ts.Name, OnDemand: ts.OnDemand}
		for _, so := range ts.Sockets {
			svc.Sockets = append(svc.Sockets, Socket{Unit: so.Unit, FDName: so.Name, File: so.File})
		}
		out = append(out, svc)
	}
	return out
}

// TemplateNames lists the template files, sorted.
func TemplateNames() []string {
	ents, _ := files.ReadDir(".")
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// Template is the content of one template file.
func Template(name string) []byte {
	b, err := files.ReadFile(name)
	if err != nil {
		return nil
	}
	return b
}

// Target is the instance's target unit.
func Target(dbID string) string { return "deepcode@" + dbID + ".target" }

// ServiceUnit is the unit of service svc in instance dbID.
func ServiceUnit(svc, dbID string) string { return "deepcode-" + svc + "@" + dbID + ".service" }

// SocketUnit is the socket unit with base name base in instance dbID.
func SocketUnit(base, dbID string) string { return "deepcode-" + base + "@" + dbID + ".socket" }

// InstanceUnits lists every unit of instance dbID: the target, the sockets
// and the services.
func InstanceUnits(dbID string) []string {
	out := []string{Target(dbID)}
	for _, s := range Services {
		for _, so := range s.Sockets {
			out = append(out, SocketUnit(so.Unit, dbID))
		}
		out = append(out, ServiceUnit(s.Name, dbID))
	}
	return out
}

// ValidInstance reports whether id can be a unit instance name as is (a
// database id is 12 lowercase base32 characters).
func ValidInstance(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Instance is what `service install` records for one database.
type Instance struct {
	DBID     string
	Database string
	Home     string
	// Libexec is the folder holding deepcode-<svc> (as invoked: a package
	// manager's stable link, not the versioned folder it resolves to).
	Libexec string
	// Path is the PATH the services run with.
	Path string
	Port int
	// Source describes the install for the files' header comment.
	Source string
}

// EnvFile is the file name of the instance's environment file, relative to
// the user's configuration folder (%E in a user unit).
func EnvFile(dbID string) string { return path.Join("deepcode", "instances", dbID+".env") }

// DropInName is the file every per-instance drop-in is called.
const DropInName = "10-deepcode-install.conf"

// DropIn is one per-instance file under the unit folder.
type DropIn struct {
	// Path is relative to the user unit folder, e.g.
	// "deepcode-manager@<id>.service.d/10-deepcode-install.conf".
	Path    string
	Content []byte
}

// DropIns renders the per-instance drop-ins: ExecStart of every service
// (the recorded executable) and the gateway's port.
func (in Instance) DropIns() ([]DropIn, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	var out []DropIn
	for _, s := range Services {
		exe, err := QuoteExecPath(path.Join(in.Libexec, "deepcode-"+s.Name))
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		in.header(&b)
		fmt.Fprintf(&b, "[Service]\nExecStart=\nExecStart=%s\n", exe)
		out = append(out, DropIn{Path: ServiceUnit(s.Name, in.DBID) + ".d/" + DropInName, Content: b.Bytes()})
	}
	var b bytes.Buffer
	in.header(&b)
	fmt.Fprintf(&b, "[Socket]\nListenStream=\nListenStream=127.0.0.1:%d\n", in.Port)
	out = append(out, DropIn{Path: SocketUnit("gateway-http", in.DBID) + ".d/" + DropInName, Content: b.Bytes()})
	return out, nil
}

// Env renders the instance's environment file. Credentials and proxy
// settings are never part of it.
func (in Instance) Env() ([]byte, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	in.header(&b)
	b.WriteString("# Credentials and proxy settings are not copied from the shell: use deepcode's\n")
	b.WriteString("# credential store, or add them here yourself.\n")
	for _, kv := range [][2]string{
		{"DEEPCODE_HOME", in.Home},
		{"DEEPCODE_DATABASE", in.Database},
		{"DEEPCODE_PORT", strconv.Itoa(in.Port)},
		{"PATH", in.Path},
	} {
		v, err := QuoteEnvValue(kv[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kv[0], err)
		}
		fmt.Fprintf(&b, "%s=%s\n", kv[0], v)
	}
	return b.Bytes(), nil
}

func (in Instance) header(b *bytes.Buffer) {
	src := in.Source
	if src == "" {
		src = "deepcode service install"
	}
	// A comment runs to the end of its line: keep it on one.
	db := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, in.Database)
	fmt.Fprintf(b, "# Written by `%s` for the database %s.\n# Do not edit: run `deepcode service install --at-login` again to change it.\n", src, db)
}

func (in Instance) check() error {
	if !ValidInstance(in.DBID) {
		return fmt.Errorf("invalid database id %q", in.DBID)
	}
	if in.Port < 1 || in.Port > 65535 {
		return fmt.Errorf("port %d: a systemd socket needs a fixed port from 1 to 65535", in.Port)
	}
	if !path.IsAbs(in.Libexec) {
		return fmt.Errorf("the service folder %q is not absolute", in.Libexec)
	}
	return nil
}

// EscapeSpecifiers doubles every % so systemd reads the text literally.
func EscapeSpecifiers(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// QuoteExecPath renders an executable path as the first word of ExecStart=:
// prefixed with ":" (no environment-variable substitution, so "$" stays
// literal), double-quoted (spaces), and with specifiers escaped ("%" →
// "%%"). Control characters, quotes and backslashes are refused: systemd
// will not run such a path.
func QuoteExecPath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("executable path %q is not absolute", p)
	}
	// systemd refuses an executable whose name holds a backslash or a quote
	// ("Executable name contains special characters"), however quoted.
	if strings.ContainsAny(p, "\\\"'") {
		return "", fmt.Errorf("systemd cannot run an executable whose path holds a quote or a backslash: %q; install deepcode in another folder", p)
	}
	q, err := quoteC(p)
	if err != nil {
		return "", fmt.Errorf("executable path: %w", err)
	}
	return `":` + EscapeSpecifiers(q) + `"`, nil
}

// QuoteArg renders one further argument of a command line (after the
// executable): double-quoted, C-escaped, specifiers escaped, and "$" doubled
// in case the line is ever used without the ":" prefix. Unused by the
// current units (the database travels in the environment file), kept with
// its tests for drop-ins that add arguments.
func QuoteArg(s string) (string, error) {
	q, err := quoteC(s)
	if err != nil {
		return "", err
	}
	return `"` + strings.ReplaceAll(EscapeSpecifiers(q), "$", "$$") + `"`, nil
}

func quoteC(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%q is not valid UTF-8", s)
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\' || r == '"':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < ' ' || r == 0x7f:
			return "", fmt.Errorf("%q holds a control character", s)
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}

// QuoteEnvValue renders a value for an EnvironmentFile=: double-quoted, with
// the characters systemd unescapes there (\ " ` $) escaped. Newlines and
// other control characters are refused.
func QuoteEnvValue(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%q is not valid UTF-8", s)
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case strings.ContainsRune("\\\"`$", r):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < ' ' || r == 0x7f:
			return "", fmt.Errorf("%q holds a control character", s)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}
