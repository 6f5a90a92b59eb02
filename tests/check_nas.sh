#!/usr/bin/env bash
# `ember nas mnist` on a tiny budget: two runs with the same seed are the same search (every
# candidate's genome, parameters and validation accuracy, the winner and both test accuracies);
# the search JSON holds every generation; bad options are clear errors.
set -euo pipefail
ember="$1"
data="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
tiny=(--population 4 --generations 3 --candidate-epochs 1 --final-epochs 1 --validation 200 --seed 3 --threads 2 --data "$data")
"$ember" nas mnist "${tiny[@]}" --save-search "$tmp/a.json" --json > "$tmp/a.txt"
"$ember" nas mnist "${tiny[@]}" --save-search "$tmp/b.json" > "$tmp/b.txt"
grep -q "^generation  2  best val" "$tmp/b.txt" || { echo "no progress line per generation"; cat "$tmp/b.txt"; exit 1; }
python3 - "$tmp/a.json" "$tmp/b.json" "$tmp/a.txt" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
result = json.loads(open(sys.argv[3]).read().strip().splitlines()[-1])
def strip(search):  # timings differ between runs; nothing else may
    search = dict(search)
    search.pop("search_seconds")
    search["generations"] = [[{k: v for k, v in c.items() if k != "seconds"} for c in g["population"]]
                             for g in search["generations"]]
    return search
assert strip(a) == strip(b), "two searches with the same seed differ"
assert len(a["generations"]) == 3 and all(len(g["population"]) == 4 for g in a["generations"]), a["generations"]
genomes = [c["genome"] for c in a["generations"][0]["population"]]
assert "cnn conv16k5/pool conv32k5/pool relu" in genomes, genomes  # the default CNN starts the search
for g in a["generations"]:
    for c in g["population"]:
        assert 0 <= c["val_accuracy"] <= 1 and c["parameters"] > 0 and c["rank"] >= 0, c
assert result["best"]["parameters"] <= result["parameter_limit"] == 18378, result
assert result["default_cnn"]["parameters"] == 18378 and result["candidates_trained"] >= 4, result
assert 0.5 < result["best"]["test_accuracy"] <= 1 and 0.5 < result["default_cnn"]["test_accuracy"] <= 1, result
assert result["beats_default_cnn"] == (result["best"]["test_accuracy"] > result["default_cnn"]["test_accuracy"])
print("nas ok:", result["best"]["genome"], result["best"]["test_accuracy"], "vs", result["default_cnn"]["test_accuracy"])
PY
expect_error() {  # expect_error PATTERN COMMAND...: the command fails and stderr matches PATTERN
  local pattern="$1"
  shift
  if "$@" > /dev/null 2> "$tmp/err.txt"; then echo "should fail: $*"; exit 1; fi
  grep -q -- "$pattern" "$tmp/err.txt" || { echo "expected \"$pattern\" from $*, got:"; cat "$tmp/err.txt"; exit 1; }
}
expect_error "\[nas\] --validation must be in \[10, 2000\]" "$ember" nas mnist --data "$data" --validation 3000
expect_error "\[nas\] --budget-minutes must be positive" "$ember" nas mnist --data "$data" --budget-minutes 0
expect_error "\[nas\] no candidate has at most 10 parameters" "$ember" nas mnist "${tiny[@]}" --max-parameters 10
expect_error "\[nas\] cannot write '/nonexistent/x.json'" "$ember" nas mnist --population 2 --generations 1 \
  --candidate-epochs 1 --final-epochs 1 --data "$data" --save-search /nonexistent/x.json
echo "errors ok"
