#pragma once
// Small hand-made plans for schedule tests: stage s holds layer s.
#include <vector>

#include "plan/plan.h"

namespace pt::schedule::testing {

// A plan with one stage per entry of `replicas`, stage s holding layer s.
inline plan::Plan plan_with_replicas(const std::vector<int>& replicas) {
  plan::Plan p;
  for (size_t s = 0; s < replicas.size(); ++s) {
    plan::Stage st;
    st.layers = {static_cast<int>(s)};
    st.replicas = replicas[s];
    p.stages.push_back(st);
  }
  plan::assign_workers(p);
  return p;
}

inline plan::Plan straight_plan(int stages) { return plan_with_replicas(std::vector<int>(stages, 1)); }

}  // namespace pt::schedule::testing
