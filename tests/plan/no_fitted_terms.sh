#!/bin/sh
# Issue 32: the cost engine and the planner carry no fitted constant or correction factor
# (docs/design.md, "One cost model, one timing model"). Fails on a source line of the planning and
# timing code that calls a term fitted, multiplies by a factor near one (x 0.9.., x 1.0..), or
# adds or takes a named percentage (1 + kSomething). A term derived from the model says
# "not fitted" where it explains itself.
#   tests/plan/no_fitted_terms.sh SOURCE_DIR
set -eu
cd "$1"
files="src/plan src/sim src/referee src/schedule/memory.cpp src/schedule/memory.h apps/plan.cpp apps/compare.cpp
apps/simulate.cpp"
# link_fit.* fits what `calibrate` measured: a measurement, not a constant.
hits=$(grep -rnE --exclude='link_fit.*' '[Ff]itted|[*] *[(]?(1[.]0[0-9]+|0[.]9[0-9]*)([^0-9]|$)|1 [+-] k[A-Z]' $files | grep -v 'not fitted' || true)
if [ -n "$hits" ]; then
  echo "a fitted term or correction factor in the cost engine or the planner:" >&2
  echo "$hits" >&2
  exit 1
fi
echo "no fitted term or correction factor in: $(echo $files)"
