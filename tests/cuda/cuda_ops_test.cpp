// gtest front end of the CUDA checks (cuda_checks.h): one test per op check and per fixture
// check; skipped when no CUDA device is present (CI builds it, GPU machines run it).
#include "backend/cuda/cuda_ops.h"

#include <gtest/gtest.h>

#include "cuda_checks.h"

namespace ft::cuda_checks {
namespace {

class CudaCheck : public ::testing::TestWithParam<Check> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaCheck, MatchesCpu) { EXPECT_EQ(GetParam().run(), ""); }

std::string name_of(const ::testing::TestParamInfo<Check>& info) {
  std::string s = info.param.name;
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaCheck, ::testing::ValuesIn(op_checks()), name_of);
INSTANTIATE_TEST_SUITE_P(Runtime, CudaCheck, ::testing::ValuesIn(runtime_checks()), name_of);
INSTANTIATE_TEST_SUITE_P(Hybrid, CudaCheck, ::testing::ValuesIn(hybrid_checks(FT_FIXTURES)),
                         name_of);
INSTANTIATE_TEST_SUITE_P(Quant, CudaCheck, ::testing::ValuesIn(quant_checks(FT_FIXTURES)),
                         name_of);
INSTANTIATE_TEST_SUITE_P(Mixed, CudaCheck, ::testing::ValuesIn(mixed_checks(FT_FIXTURES)),
                         name_of);
INSTANTIATE_TEST_SUITE_P(Elastic, CudaCheck, ::testing::ValuesIn(elastic_checks(FT_FIXTURES)),
                         name_of);
INSTANTIATE_TEST_SUITE_P(Attention, CudaCheck, ::testing::ValuesIn(attention_checks()), name_of);
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaCheck, ::testing::ValuesIn(model_checks(FT_FIXTURES)),
                         name_of);

}  // namespace
}  // namespace ft::cuda_checks
