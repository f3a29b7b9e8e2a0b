package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
	"github.com/gofrs/flock"
)

// Frozen runtime copies.
//
// `service start` from an installed package runs the service from a private
// copy of the service binaries, $DEEPCODE_HOME/runtime/<version>-<hash>/,
// so that replacing the installed files (a package upgrade, a desktop
// updater) never removes or rewrites the executables of a running
// instance: on-demand services (agentd, termhost) and restarts after a
// crash keep starting from the same copy. The next start uses the copy of
// whatever is installed then.
//
// A copy is made in a temporary folder, each file hashed while copied and
// read back to verify it, then renamed into place in one step, so a
// half-made copy is never used. A copy is named by the content hash of all
// the binaries, so identical installs share one. Every supervisor started
// from a copy is recorded in its users/ folder (by pid); a copy is removed
// only when none of the recorded supervisors is alive, and never the one
// being started. All of this happens under runtime/.lock.
//
// When: DEEPCODE_RUNTIME_COPY=1 forces copies, =0 turns them off. Otherwise
// they are used for release builds (a version set at link time, not "dev")
// whose binaries are not inside a source checkout (no go.mod in their folder
// or its two parents): development builds and tests run the binaries where
// they are. Service managers' units (systemd, launchd, Task Scheduler) run
// the installed files themselves; they restart the service across upgrades.

// EnvRuntimeCopy overrides when frozen runtime copies are used.
const EnvRuntimeCopy = "DEEPCODE_RUNTIME_COPY"

// runtimeBinaries are the files a copy holds: the supervisor and every
// service it may start (missing optional ones are skipped).
var runtimeBinaries = []string{"deepcode-supervisor", "deepcode-manager", "deepcode-gateway", "deepcode-scheduler", "deepcode-agentd", "deepcode-termhost"}

// runtimeManifest is manifest.json in a copy.
type runtimeManifest struct {
	Version string            `json:"version"`
	Source  string            `json:"source"`
	Hash    string            `json:"hash"`
	Files   map[string]string `json:"files"` // name → sha256
	Sizes   map[string]int64  `json:"sizes"`
}

// runtimeUse is the copy a launch uses; it holds runtime/.lock until the
// supervisor is recorded as a user (or the launch gave up).
type runtimeUse struct {
	dir  string
	lock *flock.Flock
}

// started records the supervisor pid as a user of the copy and releases
// the lock.
func (u *runtimeUse) started(pid int) {
	if u == nil {
		return
	}
	users := filepath.Join(u.dir, "users")
	if err := os.MkdirAll(users, 0o700); err == nil {
		_ = os.WriteFile(filepath.Join(users, strconv.Itoa(pid)), nil, 0o600)
	}
	u.release()
}

func (u *runtimeUse) release() {
	if u != nil && u.lock != nil {
		_ = u.lock.Unlock()
		u.lock = nil
	}
}

// runtimeCopyWanted decides whether the binaries in dir run from a copy.
func runtimeCopyWanted(dir string) bool {
	switch strings.ToLower(os.Getenv(EnvRuntimeCopy)) {
	case "1", "true", "yes", "on":
		return true
	case "0", "false", "no", "off":
		return false
	}
	if buildinfo.Version == "" || buildinfo.Version == "dev" {
		return false
	}
	for d, i := dir, 0; i < 3; d, i = filepath.Dir(d), i+1 {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return false
		}
	}
	return true
}

// serviceBinaries returns the folder to launch the supervisor from: dir
// itself, or a verified frozen copy of its binaries. A non-nil use must be
// told the supervisor's pid (started) or released.
func (a *app) serviceBinaries(dir string) (string, *runtimeUse, error) {
	if !runtimeCopyWanted(dir) {
		return dir, nil, nil
	}
	root := filepath.Join(a.layout.Home, "runtime")
	if err := fsutil.EnsurePrivateDir(root); err != nil {
		return "", nil, errs.Wrap(err, errs.StartFailed, "cannot create %s", root)
	}
	lock := flock.New(filepath.Join(root, ".lock"), flock.SetPermissions(0o600))
	if err := lock.Lock(); err != nil {
		return "", nil, errs.Wrap(err, errs.StartFailed, "cannot lock %s", root)
	}
	use := &runtimeUse{lock: lock}
	copyDir, err := prepareRuntime(root, dir)
	if err != nil {
		use.release()
		return "", nil, err
	}
	use.dir = copyDir
	pruneRuntimes(root, copyDir)
	return copyDir, use, nil
}

// sourceManifest hashes the installed binaries.
func sourceManifest(src string) (runtimeManifest, error) {
	m := runtimeManifest{Version: buildinfo.Version, Source: src, Files: map[string]string{}, Sizes: map[string]int64{}}
	all := sha256.New()
	for _, name := range runtimeBinaries {
		name += exeSuffix
		sum, size, err := hashFile(filepath.Join(src, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return m, errs.Wrap(err, errs.StartFailed, "cannot read %s", filepath.Join(src, name))
		}
		m.Files[name], m.Sizes[name] = sum, size
		fmt.Fprintf(all, "%s %d %s\n", name, size, sum)
	}
	if m.Files["deepcode-supervisor"+exeSuffix] == "" {
		return m, errs.New(errs.StartFailed, "no deepcode-supervisor in %s", src)
	}
	m.Hash = hex.EncodeToString(all.Sum(nil))
	return m, nil
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// folderSafe replaces the characters kept out of a runtime folder name
// (all but A-Z a-z 0-9 . _ + -) with "_".
func folderSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-", r) {
			return r
		}
		return '_'
	}, s)
}

// prepareRuntime returns the copy of src's binaries, making it if needed.
func prepareRuntime(root, src string) (string, error) {
	m, err := sourceManifest(src)
	if err != nil {
		return "", err
	}
	version := folderSafe(m.Version)
	if len(version) > 40 {
		version = version[:40]
	}
	final := filepath.Join(root, version+"-"+m.Hash[:16])
	if runtimeIntact(final, m) {
		return final, nil
	}
	if _, err := os.Stat(final); err == nil {
		// Damaged (or foreign): set it aside; a running instance may still
		// use its files, so it is removed like an old copy, when unused.
		_ = os.Rename(final, filepath.Join(root, ".damaged-"+strconv.Itoa(os.Getpid())+"-"+filepath.Base(final)))
	}
	tmp, err := os.MkdirTemp(root, ".tmp-")
	if err != nil {
		return "", errs.Wrap(err, errs.StartFailed, "cannot create a runtime copy in %s", root)
	}
	defer os.RemoveAll(tmp) // gone after the rename
	for name, sum := range m.Files {
		if err := copyVerified(filepath.Join(src, name), filepath.Join(tmp, name), sum); err != nil {
			return "", err
		}
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := fsutil.WriteFileAtomic(filepath.Join(tmp, "manifest.json"), b, 0o600); err != nil {
		return "", errs.Wrap(err, errs.StartFailed, "cannot write the runtime manifest")
	}
	if err := os.Chmod(tmp, 0o700); err != nil {
		return "", errs.Wrap(err, errs.StartFailed, "cannot prepare %s", tmp)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", errs.Wrap(err, errs.StartFailed, "cannot install the runtime copy %s", final)
	}
	return final, nil
}

// runtimeIntact: the copy exists and its manifest names the same files,
// sizes and hash (the folder is private: a full re-hash is not needed).
func runtimeIntact(dir string, want runtimeManifest) bool {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return false
	}
	var m runtimeManifest
	if json.Unmarshal(b, &m) != nil || m.Hash != want.Hash || len(m.Files) != len(want.Files) {
		return false
	}
	for name, sum := range want.Files {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || m.Files[name] != sum || fi.Size() != want.Sizes[name] || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// copyVerified copies src to dst (0755, synced), checks the content hash
// of what was read and then of what was written.
func copyVerified(src, dst, want string) error {
	in, err := os.Open(src)
	if err != nil {
		return errs.Wrap(err, errs.StartFailed, "cannot read %s", src)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return errs.Wrap(err, errs.StartFailed, "cannot create %s", dst)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errs.Wrap(err, errs.StartFailed, "cannot copy %s", src)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return errs.New(errs.StartFailed, "%s changed while it was copied (being replaced?): try again", src)
	}
	if got, _, err := hashFile(dst); err != nil || got != want {
		return errs.New(errs.StartFailed, "the runtime copy %s does not verify", dst)
	}
	return nil
}

// runtimeUsers lists the live supervisors recorded in a copy, forgetting
// dead ones.
func runtimeUsers(dir string) []int {
	ents, _ := os.ReadDir(filepath.Join(dir, "users"))
	var live []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pidAlive(pid) {
			live = append(live, pid)
			continue
		}
		_ = os.Remove(filepath.Join(dir, "users", e.Name()))
	}
	slices.Sort(live)
	return live
}

// pidAlive is processAlive where it can tell; elsewhere a recorded user is
// kept (a copy still in use cannot be deleted on Windows anyway).
func pidAlive(pid int) bool {
	if exeSuffix != "" {
		return true
	}
	return processAlive(pid)
}

// pruneRuntimes removes the copies no live supervisor uses, except keep,
// and leftovers of interrupted copies. Called under runtime/.lock.
func pruneRuntimes(root, keep string) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if dir == keep {
			continue
		}
		if !strings.HasPrefix(e.Name(), ".tmp-") && len(runtimeUsers(dir)) > 0 {
			continue
		}
		// Rename first: a folder whose executables run cannot be renamed
		// on Windows, so a copy in use is never half-deleted.
		trash := filepath.Join(root, ".trash-"+strconv.Itoa(os.Getpid())+"-"+e.Name())
		if strings.HasPrefix(e.Name(), ".trash-") {
			trash = dir
		} else if os.Rename(dir, trash) != nil {
			continue
		}
		_ = os.RemoveAll(trash)
	}
}
