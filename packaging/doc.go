// Package packaging holds the distribution packaging of deepcode (nfpm
// configuration, Homebrew formula, Arch PKGBUILD, build.sh) and the test
// that builds the .deb, installs it with dpkg and runs it from the
// installed files (package_test.go; CI only: see .ci/run).
package packaging
