#!/usr/bin/env bash
# `ember train mnist --profile` writes a valid Chrome trace (ops with shapes, FLOPs and bytes,
# forward/backward/optimizer phases, module ranges around the forward ops, memory counters) and
# prints the top ops; `ember roofline --from-trace` plots them as a well-formed SVG with one marker
# per op that has a cost. The peaks cache goes to the temp folder, not the user's home.
set -euo pipefail
ember="$1"
data="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export EMBER_PEAKS_CACHE="$tmp/peaks.json"

"$ember" train mnist --epochs 1 --threads 2 --data "$data" --profile "$tmp/t.json" > "$tmp/train.txt"
for text in "op calls" "GFLOP/s" "% roof" "conv2d_backward" "trace written to"; do
  grep -q -- "$(sed 's/ /.*/g' <<<"$text")" "$tmp/train.txt" || { echo "missing '$text' in:"; cat "$tmp/train.txt"; exit 1; }
done
test -s "$EMBER_PEAKS_CACHE" || { echo "the peaks were not cached"; exit 1; }

"$ember" roofline --from-trace "$tmp/t.json" --svg "$tmp/r.svg" --json > "$tmp/roofline.json"
"$ember" roofline --from-trace "$tmp/t.json" > "$tmp/roofline.txt"
grep -q "ridge point" "$tmp/roofline.txt"

python3 - "$tmp/t.json" "$tmp/r.svg" "$tmp/roofline.json" <<'PY'
import json, sys
import xml.etree.ElementTree as ET

trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"]
complete = [e for e in events if e["ph"] == "X"]
assert sum(e["ph"] == "B" for e in events) == sum(e["ph"] == "E" for e in events)
ops = [e for e in complete if e["cat"] == "op"]
names = {e["name"] for e in ops}
assert len(names) >= 10, names
assert {e["args"]["phase"] for e in ops} == {"forward", "backward", "optimizer"}
costed = [e for e in ops if "flops" in e["args"]]
assert costed and all("bytes" in e["args"] and "shapes" in e["args"] and "dtypes" in e["args"] for e in costed)
assert any(e["name"] == "conv2d" and e["args"]["flops"] > 0 for e in costed)
counters = [e for e in events if e["ph"] == "C"]
assert counters and all(e["args"]["bytes"] >= 0 for e in counters), "no memory counter"

# Per thread: timestamps never go back and complete events nest (inside the enclosing one, or after it).
by_thread = {}
for e in complete:
    by_thread.setdefault(e["tid"], []).append(e)
for tid, evs in by_thread.items():
    stack, last = [], -1.0
    for e in evs:
        assert e["ts"] >= last, ("time went back", e)
        last = e["ts"]
        end = e["ts"] + e["dur"]
        while stack and e["ts"] >= stack[-1]:
            stack.pop()
        assert not stack or end <= stack[-1] + 1e-3, ("overlaps its parent", e)
        stack.append(end)
# Forward ops of the model run inside a module range.
modules = [e for e in complete if e["cat"] == "module"]
for e in ops:
    if e["name"] in ("conv2d", "max_pool2d", "linear") and e["args"]["phase"] == "forward":
        assert any(m["tid"] == e["tid"] and m["ts"] <= e["ts"] and e["ts"] + e["dur"] <= m["ts"] + m["dur"] + 1e-3
                   for m in modules), ("not inside a module", e)

svg = ET.parse(sys.argv[2]).getroot()
ns = "{http://www.w3.org/2000/svg}"
markers = [c for c in svg.iter(ns + "circle") if c.get("class") == "point"]
points = json.load(open(sys.argv[3]))["points"]
with_cost = {e["name"] for e in costed if e["args"]["flops"] > 0 and e["args"]["bytes"] > 0}
assert len(markers) == len(points) == len(with_cost), (len(markers), len(points), with_cost)
titles = {c.find(ns + "title").text.split(":")[0] for c in markers}
assert titles == with_cost, (titles, with_cost)
print("trace and roofline ok:", len(names), "ops,", len(markers), "markers,", len(counters), "memory samples")
PY

# Bad input is a clear error, not a crash.
if "$ember" roofline --from-trace "$tmp/missing.json" 2> "$tmp/err.txt"; then echo "a missing trace should fail"; exit 1; fi
grep -q "\[roofline\] cannot open trace" "$tmp/err.txt"
echo '{"not": "a trace"}' > "$tmp/bad.json"
if "$ember" roofline --from-trace "$tmp/bad.json" 2> "$tmp/err.txt"; then echo "a bad trace should fail"; exit 1; fi
grep -q "\[roofline\] .* has no traceEvents" "$tmp/err.txt"
echo "ok"
