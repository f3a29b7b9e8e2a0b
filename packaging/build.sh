#!/usr/bin/env bash
# Builds the deepcode .deb and .rpm into $DIST (default dist/) with nfpm:
# stages the Linux binaries, the shell completions and the manual pages
# (both generated from the cobra command tree) and the Debian changelog,
# composes the nfpm configuration and packs.
#
#   VERSION   version baked into the binaries (default: git describe)
#   GOARCH    target architecture (default: go env GOARCH)
#   FORMATS   package formats (default: "deb rpm")
#   DIST      output folder (default: dist)
#   NFPM      the nfpm command (default: go run of the pinned nfpm release)
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
NFPM_VERSION=v2.45.2
NFPM=${NFPM:-"$GO run github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION"}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
ARCH=${GOARCH:-$($GO env GOARCH)}
FORMATS=${FORMATS:-deb rpm}
DIST=${DIST:-dist}
mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
STAGE="$DIST/stage-$ARCH"

# Debian and RPM versions must start with a digit; a "-" would split off a
# release. A version that is no release tag becomes 0.0.0~git<describe>.
v=${VERSION#v}
# (A bare commit hash may start with a digit: a release has a dotted number.)
if [[ ! $v =~ ^[0-9]+\.[0-9]+ ]]; then v="0.0.0~git$v"; fi
PKG_VERSION=${v//-/.}
# Dates in the manual pages and the changelog: the commit's, so a rebuild of
# one commit gives the same files (cobra/doc reads SOURCE_DATE_EPOCH too).
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/libexec" "$STAGE/completions" "$STAGE/man"
ldflags="-s -w -X github.com/deepcode-dev/deepcode/shared/buildinfo.Version=$VERSION"
build() { GOOS=linux GOARCH=$ARCH CGO_ENABLED=0 $GO build -trimpath -ldflags "$ldflags" "$@"; }
build -o "$STAGE/bin/deepcode" ./cmd/deepcode
# The services, and deepcode-tui (the TUI with its Markdown renderer, which
# deepcode runs: deepcode itself does not link the renderer).
for s in manager gateway supervisor agentd termhost scheduler tui; do
  build -o "$STAGE/libexec/deepcode-$s" "./cmd/deepcode-$s"
done

# Completions come from the command tree; they do not depend on the target
# architecture, so a host build generates them.
host_cli="$STAGE/bin/deepcode"
if [ "$ARCH" != "$($GO env GOHOSTARCH)" ]; then
  host_cli="$DIST/deepcode-host"
  $GO build -o "$host_cli" ./cmd/deepcode
fi
"$host_cli" completion bash >"$STAGE/completions/deepcode.bash"
"$host_cli" completion zsh >"$STAGE/completions/_deepcode"
"$host_cli" completion fish >"$STAGE/completions/deepcode.fish"
[ "$host_cli" = "$STAGE/bin/deepcode" ] || rm -f "$host_cli"

# Manual pages: one per command, from the same tree (a host program).
$GO run ./packaging/mangen -dir "$STAGE/man" -version "$VERSION"
gzip -9n "$STAGE"/man/*.1

# The Debian changelog of this version, a native package's (no Debian
# revision: nfpm.yaml sets no release); lintian wants one. The changes
# themselves are in the git history.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  echo "deepcode ($PKG_VERSION) unstable; urgency=medium"
  echo
  echo "  * Built from $VERSION (commit $commit); the changes are in the"
  echo "    project's git history."
  echo
  echo " -- deepcode maintainers <maintainers@deepcode.dev>  $(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
} >"$STAGE/changelog"
gzip -9n "$STAGE/changelog"

config="$DIST/nfpm.yaml"
# nfpm expands variables in arch and version only: the stage is put in here.
sed "s|\${DEEPCODE_STAGE}|$STAGE|g" packaging/nfpm.yaml >"$config"
if compgen -G 'units/*.service' >/dev/null && compgen -G 'units/*.socket' >/dev/null && compgen -G 'units/*.target' >/dev/null; then
  cat packaging/nfpm-units.yaml >>"$config"
else
  echo "build.sh: units/ has no complete set of unit templates yet (.target, .socket, .service): packaging without them" >&2
fi

export DEEPCODE_ARCH=$ARCH DEEPCODE_PKG_VERSION=$PKG_VERSION
for f in $FORMATS; do
  $NFPM package --config "$config" --packager "$f" --target "$DIST/"
done
ls -1 "$DIST"/*.deb "$DIST"/*.rpm 2>/dev/null || true
