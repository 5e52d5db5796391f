#!/usr/bin/env bash
# Run the unit tier N times in a row, each in a random order of its own (its seed printed), while CPU hogs keep
# every core busy, to show that no test depends on the machine's load (a test that passes only on an idle machine
# is a defect) or on the order.
#
#   bash tests/soak.sh [RUNS]        # default 5; run from the repository root, in the project's venv
#
# The hogs are `stress-ng --cpu <cores>` (Debian's stress-ng package) or, without it, one `yes > /dev/null`
# per core; they are stopped when the script ends, however it ends. Each run's pytest output goes to a new
# directory under /tmp (or SOAK_LOGS); the script prints one line per run and exits non-zero if any failed.
set -euo pipefail

runs="${1:-5}"
logs="${SOAK_LOGS:-$(mktemp -d /tmp/spotshift-soak.XXXXXX)}"
cores="$(nproc)"
mkdir -p "${logs}"

hogs=()
stop_hogs() {
    for pid in "${hogs[@]}"; do
        kill "${pid}" 2>/dev/null || true
    done
    for pid in "${hogs[@]}"; do
        wait "${pid}" 2>/dev/null || true
    done
}
trap stop_hogs EXIT

if command -v stress-ng >/dev/null; then
    stress-ng --cpu "${cores}" --quiet &
    hogs+=("$!")
    hog="stress-ng --cpu ${cores}"
else
    for _ in $(seq "${cores}"); do
        yes >/dev/null &
        hogs+=("$!")
    done
    hog="${cores} x yes"
fi
echo "soak: ${runs} runs of tests/unit under ${hog}; logs in ${logs}"

failed=0
for run in $(seq "${runs}"); do
    log="${logs}/run-${run}.log"
    start="$(date +%s)"
    seed="$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"
    if python -m pytest tests/unit -q -p no:cacheprovider -p randomly --randomly-seed="${seed}" >"${log}" 2>&1; then
        status=passed
    else
        status=FAILED
        failed=$((failed + 1))
    fi
    echo "run ${run}: ${status} in $(($(date +%s) - start)) s, --randomly-seed=${seed}: $(tail -n 1 "${log}")"
    if [[ "${status}" == FAILED ]]; then
        grep -E '^(FAILED|ERROR) ' "${log}" | sed 's/^/    /' || true
    fi
done
echo "soak: ${failed} of ${runs} runs failed"
[[ "${failed}" -eq 0 ]]
