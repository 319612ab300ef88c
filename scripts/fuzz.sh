#!/usr/bin/env bash
# Runs every fuzz target of the module (each `func FuzzXxx` in a _test.go file) for FUZZTIME
# each, from its seed corpus in the package's testdata/fuzz/FuzzXxx. `go test -fuzz` runs one
# target per invocation, so the targets run one after another. A crasher is written by Go into
# testdata/fuzz/FuzzXxx/; add it to the commit with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-60s}
targets=$(git ls-files '*_test.go' | xargs grep -H -o -E '^func Fuzz[A-Za-z0-9_]+' | sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]+)#\1 \2#' | sort -u)
if [ -z "$targets" ]; then
	echo "no fuzz targets found" >&2
	exit 1
fi
n=$(printf '%s\n' "$targets" | wc -l)
echo "fuzzing $n targets for $fuzztime each"
i=0
while read -r dir name; do
	i=$((i + 1))
	start=$SECONDS
	printf '[%d/%d] %s ./%s ... ' "$i" "$n" "$name" "$dir"
	before=$(git status --porcelain -- "$dir/testdata/fuzz/$name" 2>/dev/null)
	if ! out=$(go test -run "^${name}\$" -fuzz "^${name}\$" -fuzztime "$fuzztime" "./$dir" 2>&1); then
		# Go 1.26's fuzzer can end a clean run with "context deadline exceeded" at the -fuzztime
		# boundary (golang/go#75804, fixed in 1.27); without a new crasher that is a pass.
		if grep -q 'context deadline exceeded' <<< "$out" && ! grep -q 'Failing input written' <<< "$out" &&
			[ "$(git status --porcelain -- "$dir/testdata/fuzz/$name" 2>/dev/null)" = "$before" ]; then
			echo "ok ($((SECONDS - start))s; the fuzzer's deadline quirk, golang/go#75804, no crasher)"
			continue
		fi
		echo "FAILED"
		printf '%s\n' "$out"
		exit 1
	fi
	echo "ok ($((SECONDS - start))s)"
done <<< "$targets"
