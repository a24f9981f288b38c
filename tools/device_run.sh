#!/usr/bin/env bash
# A GPU run that fits a short window on a lent machine (docs/ci.md, "A device run"): two calls, each well inside a
# 10-minute command, every result copied to $OUT as it comes.
#
#   tools/device_run.sh start PROFILE...   set up, then start each profile's build in its own session (setsid), the
#                                          next once the last is past the checkout's lock, and return; the machine
#                                          must be called again within its warm time (30 s)
#   tools/device_run.sh gates PROFILE...   wait for each build, then every gate (gpu-tests), the profile's
#                                          self-test faults and the engine-path cost benchmark, one after another
#                                          (DEVICE_GATES=0, DEVICE_SELFTEST=0 or DEVICE_BENCH=0 leave one out, so that
#                                          each call stays inside 10 minutes: H200 figures in docs/ci.md;
#                                          DEVICE_GATE_ARGS: more gpu-tests flags, e.g. "--rounds 10")
#   tools/device_run.sh fault PROFILE...   the patches in .dev/fault/ added to the series, the build made again, and
#                                          every gate on it (a planted fault the self-test's machinery would not judge
#                                          whole: the perf gate's real-shaped set), its results saved as *-fault
# DEVICE_SHAPES=real with `start`: the real-shaped models written beside the build (nice'd, in a session of their own),
# so that the perf gate finds them cached; DEVICE_WAIT=S: `start` waits up to S seconds for the builds to end.
#
# What it reads, carried with the call (none of it committed: the fork's code never is):
#   .dev/project.bundle   git bundle of this project (git bundle create .dev/project.bundle HEAD)
#   .dev/mirror           a bare mirror of the fork (the fetch tool's snapshot serves)
#   .dev/*.patch          patches to add to the series for this run (e.g. the layer-inputs offset at c14872f)
#   .whl/                 wheels the machine lacks (pygit2, cffi, pycparser, gguf, junitparser)
#   .dev/deb/             for vulkan: Debian's glslc, libshaderc1, the loader libvulkan1 and the glvnd libraries
#                         (unpacked into /), and libvulkan-dev and spirv-headers 1.4.309 (trixie's; into the folder
#                         VULKAN_SDK names): docs/ci.md, "A GPU machine with no network"
# and, to move the pin to another fork for the run: DEVICE_PIN=SHA DEVICE_URL=URL [DEVICE_BRANCH=B] (the pin's own
# test-backend-ops counts are taken). Work goes to /tmp/onebit-device (it stays while the machine is warm).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=/tmp/onebit-device
out=${OUT:-$work/out}
phase=${1:?usage: tools/device_run.sh start|gates PROFILE...}
shift
profiles=("$@")
[ ${#profiles[@]} -gt 0 ] || { echo "device_run: name at least one profile (cuda, vulkan)" >&2; exit 2; }
mkdir -p "$work" "$out"
export PYTHONUNBUFFERED=1 GIT_AUTHOR_NAME=device GIT_AUTHOR_EMAIL=device@example.invalid GIT_COMMITTER_NAME=device GIT_COMMITTER_EMAIL=device@example.invalid
if [ -d "$here/.whl" ] && [ ! -d "$work/site" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" "$here"/.whl/*.whl
fi
export PYTHONPATH=$work/site
ci() { (cd "$work/proj" && python3 -m ci "$@"); }
if [[ " ${profiles[*]} " == *" vulkan "* ]] && [ -d "$here/.dev/deb" ]; then
    if [ ! -d "$work/vulkan-sdk" ]; then
        for f in "$here"/.dev/deb/*.deb; do
            case "$(basename "$f")" in
            libvulkan-dev_* | spirv-headers_*) dpkg -x "$f" "$work/vulkan-sdk" ;;
            *) dpkg -x "$f" / ;;
            esac
        done
        ldconfig
    fi
    export VULKAN_SDK=$work/vulkan-sdk/usr VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
fi
save() { cp "$1" "$out/$2" 2>/dev/null || true; }  # a result to $OUT the moment it exists

case "$phase" in
start)
    t0=$(date +%s)
    if [ ! -d "$work/proj" ]; then
        git clone -q "$here/.dev/project.bundle" "$work/proj"
        if [ -n "${DEVICE_PIN:-}" ]; then
            # the pin's own test-backend-ops counts (read from its tests/test-backend-ops.cpp): --accept-counts
            ci bump-pin "$DEVICE_PIN" --remote "$here/.dev/mirror" --branch "${DEVICE_BRANCH:-main}" --url "${DEVICE_URL:?DEVICE_URL: the fork the pin is on}" --allow-rollback --no-compile --accept-counts
            for p in "$here"/.dev/*.patch; do
                [ -e "$p" ] || continue
                cp "$p" "$work/proj/patches/"
                basename "$p" >> "$work/proj/patches/series"
            done
            git -C "$work/proj" add -A && git -C "$work/proj" commit -qm "device run: pin $DEVICE_PIN"
        fi
    fi
    for profile in "${profiles[@]}"; do
        setsid bash -c "cd '$work/proj' && python3 -m ci build --profile $profile --remote '$here/.dev/mirror' > '$work/build-$profile.log' 2>&1; echo \$? > '$work/build-$profile.rc'" < /dev/null > /dev/null 2>&1 &
        echo "device_run: $profile build started (log $work/build-$profile.log)"
        # one checkout sync at a time (its lock refuses a second): the next build starts once this one is past it
        for _ in $(seq 240); do
            grep -q '^step: checkout and patches:' "$work/build-$profile.log" 2>/dev/null || [ -e "$work/build-$profile.rc" ] && break
            sleep 0.5
        done
    done
    if [ -n "${DEVICE_SHAPES:-}" ]; then
        setsid nice -n 19 bash -c "cd '$work/proj' && python3 -c 'from ci.gates.shapes.models import write_set; write_set(\"$DEVICE_SHAPES\", say=print)' > '$work/shapes.log' 2>&1; echo \$? > '$work/shapes.rc'" < /dev/null > /dev/null 2>&1 &
        echo "device_run: writing the $DEVICE_SHAPES shapes (log $work/shapes.log)"
    fi
    echo "device_run: set up in $(( $(date +%s) - t0 )) s"
    for _ in $(seq "${DEVICE_WAIT:-0}"); do
        done_all=1
        for profile in "${profiles[@]}"; do [ -e "$work/build-$profile.rc" ] || done_all=0; done
        [ $done_all = 1 ] && break
        sleep 1
    done
    for profile in "${profiles[@]}"; do
        echo "device_run: $profile build: $(tail -c 300 "$work/build-$profile.log" | tr '\r' '\n' | tail -1)"
    done
    [ -e "$work/shapes.log" ] && { save "$work/shapes.log" shapes.log; echo "device_run: shapes: $(tail -3 "$work/shapes.log" | tr '\n' ' ')"; }
    ;;
fault)
    for profile in "${profiles[@]}"; do
        t0=$(date +%s)
        for p in "$here"/.dev/fault/*.patch; do
            [ -e "$p" ] || continue
            cp "$p" "$work/proj/patches/"
            grep -qx "$(basename "$p")" "$work/proj/patches/series" || basename "$p" >> "$work/proj/patches/series"
        done
        git -C "$work/proj" add -A && git -C "$work/proj" commit -qm "device run: a planted fault" || true
        ci build --profile "$profile" --remote "$here/.dev/mirror" > "$work/build-$profile-fault.log" 2>&1 || { echo "device_run: the faulted $profile build failed"; save "$work/build-$profile-fault.log" "build-$profile-fault.log"; continue; }
        echo "device_run: faulted $profile build in $(( $(date +%s) - t0 )) s: $(grep -o 'configure and compile: done in [0-9.]* s' "$work/build-$profile-fault.log" || true)"
        t0=$(date +%s)
        # shellcheck disable=SC2086  # the flags word by word
        ci gpu-tests --profile "$profile" ${DEVICE_GATE_ARGS:-} 2>&1 | tee "$work/gates-$profile-fault.log" | grep -E '^(gpu_tests|route|backend_ops|oracle|equivalence|archs|perf) ' || true
        save "$work/gates-$profile-fault.log" "gates-$profile-fault.log"
        for f in perf.json perf-real-shape-samples.json; do
            found=$(find "$work/proj/build/results" -name "$f" -newer "$work/build-$profile-fault.log" 2>/dev/null | head -1)
            [ -n "$found" ] && save "$found" "${f%.json}-$profile-fault.json"
        done
        echo "device_run: faulted $profile gates in $(( $(date +%s) - t0 )) s"
    done
    ;;
gates)
    for profile in "${profiles[@]}"; do
        t0=$(date +%s)
        while [ ! -e "$work/build-$profile.rc" ]; do sleep 5; done
        save "$work/build-$profile.log" "build-$profile.log"
        [ "$(cat "$work/build-$profile.rc")" = 0 ] || { echo "device_run: the $profile build failed (build-$profile.log)"; continue; }
        echo "device_run: $profile build waited $(( $(date +%s) - t0 )) s; $(grep -o 'configure and compile: done in [0-9.]* s' "$work/build-$profile.log" || true)"
        t0=$(date +%s)
        # shellcheck disable=SC2086  # the flags word by word
        [ "${DEVICE_GATES:-1}" = 1 ] && ci gpu-tests --profile "$profile" ${DEVICE_GATE_ARGS:-} 2>&1 | tee "$work/gates-$profile.log" | grep -E '^(gpu_tests|route|backend_ops|oracle|equivalence|archs|perf) ' || true
        save "$work/gates-$profile.log" "gates-$profile.log"
        save "$work/proj/build/results/ledger.jsonl" "ledger.jsonl"
        for f in perf.json perf-real-shape-samples.json; do
            found=$(find "$work/proj/build/results" -name "$f" -newer "$work/build-$profile.rc" 2>/dev/null | head -1)
            [ -n "$found" ] && save "$found" "${f%.json}-$profile.json"
        done
        chart=$(find "$work/proj/build/results" -name perf.svg -newer "$work/build-$profile.rc" 2>/dev/null | head -1)
        [ -n "$chart" ] && save "$chart" "perf-$profile.svg" && save "$(dirname "$chart")/perf-samples.json" "perf-samples-$profile.json"
        echo "device_run: $profile gates in $(( $(date +%s) - t0 )) s"
        faults=$(cd "$work/proj" && python3 -c "from ci.gates.selftest.run import load_faults; import sys; print(' '.join('--fault ' + f.id for f in load_faults() if sys.argv[1] in f.profiles))" "$profile")
        if [ -n "$faults" ] && [ "${DEVICE_SELFTEST:-1}" = 1 ]; then
            t0=$(date +%s)
            # shellcheck disable=SC2086  # one word per --fault and id
            ci gate-selftest --profile "$profile" $faults --jobs 4 > "$work/selftest-$profile.log" 2>&1 || true
            save "$work/selftest-$profile.log" "selftest-$profile.log"
            echo "device_run: $profile self-test in $(( $(date +%s) - t0 )) s: $(grep '^gate_selftest: [A-Z]' "$work/selftest-$profile.log" | tail -1)"
        fi
        if [ "${DEVICE_BENCH:-1}" = 1 ]; then
            t0=$(date +%s)
            (cd "$work/proj" && python3 benchmarks/engine_path_cost.py --profile "$profile" --llama-server "$work/proj/build/$profile/bin/llama-server" --rounds 2 > "$work/cost-$profile.log" 2>&1) || true
            save "$work/cost-$profile.log" "cost-$profile.log"
            echo "device_run: $profile engine-path cost in $(( $(date +%s) - t0 )) s"
        fi
    done
    ;;
*)
    echo "device_run: $phase: give start, gates or fault" >&2
    exit 2
    ;;
esac
