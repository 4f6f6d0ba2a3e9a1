#!/bin/bash
# make docs as a test: the API reference builds from the installed headers with no Doxygen warning
# (docs/Doxyfile fails on any), into a directory of its own.  usage: api_reference_test.sh OUT_DIR
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:?usage: api_reference_test.sh OUT_DIR}
command -v doxygen >/dev/null || { echo "api_reference_test: doxygen is missing: make deps installs it" >&2; exit 1; }
rm -rf "$out" && mkdir -p "$out"
EVRDMA_DOCS_DIR=$(cd "$out" && pwd) doxygen docs/Doxyfile || { echo "api_reference_test: Doxygen warned (above)" >&2; exit 1; }
[ -s "$out/html/index.html" ] && [ -s "$out/html/classevrdma_1_1Connection.html" ] \
    || { echo "api_reference_test: no reference written" >&2; exit 1; }
echo "api reference: $(ls "$out/html" | wc -l) files in $out/html"
