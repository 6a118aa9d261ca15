#!/usr/bin/env bash
# Builds the pinned OpenTelemetry Collector of tools/otelcol/builder-config.yaml with the
# Collector's builder (OCB, at the manifest's release) once, into a cache directory named by the
# manifest's hash, and prints the binary's path. Later runs print the same path at once.
#
#   OTELCOL="$(tools/otelcol/build.sh)"
#
# Needs Go (the version the manifest's release asks for; 1.26 for v0.161.0) and the Go module
# proxy. Progress goes to stderr; stdout is only the path. Cache root:
# RETRY_SPEND_OTELCOL_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/retry-spend-collector.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
manifest="$here/builder-config.yaml"

if ! command -v go >/dev/null 2>&1; then
    if [ -x /usr/local/go/bin/go ]; then
        PATH="/usr/local/go/bin:$PATH"
    else
        echo "tools/otelcol/build.sh: go not found: building the OpenTelemetry Collector needs Go 1.26 or newer (https://go.dev/dl/)" >&2
        exit 1
    fi
fi

# The builder's release is the manifest's (the version on its otlpreceiver line).
release="$(sed -n 's|^ *- gomod: go.opentelemetry.io/collector/receiver/otlpreceiver \(v[0-9.]*\)$|\1|p' "$manifest")"
if [ -z "$release" ]; then
    echo "tools/otelcol/build.sh: no otlpreceiver line in $manifest to take the builder's release from" >&2
    exit 1
fi

hash="$(sha256sum "$manifest" | cut -c1-16)"
root="${RETRY_SPEND_OTELCOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retry-spend-collector}"
dir="$root/otelcol-$hash"
if [ -x "$dir/otelcol" ]; then
    echo "$dir/otelcol"
    exit 0
fi

start=$SECONDS
mkdir -p "$root"
work="$(mktemp -d "$root/otelcol-$hash.building.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "building the OpenTelemetry Collector ($release) of $manifest into $dir" >&2
GOBIN="$work/bin" go install "go.opentelemetry.io/collector/cmd/builder@$release" >&2
# The manifest names no output path (the cache decides it): a copy with one.
sed "s|^dist:\$|dist:\n  output_path: $work/dist|" "$manifest" >"$work/builder-config.yaml"
"$work/bin/builder" --config "$work/builder-config.yaml" >&2
mkdir -p "$work/out"
mv "$work/dist/otelcol" "$work/out/otelcol"
cp "$manifest" "$work/out/builder-config.yaml"
# Appears whole or not at all: a build stopped half way is redone on the next run.
rm -rf "$dir"
mv "$work/out" "$dir"
echo "built $dir/otelcol in $((SECONDS - start)) s" >&2
echo "$dir/otelcol"
