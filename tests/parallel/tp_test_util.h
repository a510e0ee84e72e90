// Helpers shared by the tensor-parallel CPU tests: fixture paths, seeded random vectors, and the
// check that a plan is refused with a one-line error naming the cause.
#pragma once
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "base/error.h"

namespace ft::test {

inline std::string fixture(const char* name) { return std::string(FT_FIXTURES) + "/" + name; }

inline std::vector<float> randv(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// plan() (a call of plan_tensor_parallel) must throw one line containing needle.
template <class Plan>
void expect_refused(Plan&& plan, const char* needle, const std::string& what) {
  try {
    plan();
    ADD_FAILURE() << what << " accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

}  // namespace ft::test
