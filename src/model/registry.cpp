// The family registry: one line per supported model_type.
#include "model/family.h"

namespace ft {

extern const Family k_qwen3_moe_family;
extern const Family k_mixtral_family;
extern const Family k_olmoe_family;
extern const Family k_qwen3_next_family;
extern const Family k_qwen3_5_moe_family;
extern const Family k_qwen3_5_moe_text_family;
extern const Family k_gpt_oss_family;

namespace {
const Family* const k_families[] = {&k_qwen3_moe_family,   &k_mixtral_family,
                                    &k_olmoe_family,       &k_qwen3_next_family,
                                    &k_qwen3_5_moe_family, &k_qwen3_5_moe_text_family,
                                    &k_gpt_oss_family};
}

const Family* find_family(const std::string& model_type) {
  for (const Family* f : k_families)
    if (model_type == f->model_type) return f;
  return nullptr;
}

std::string supported_families() {
  std::string s;
  for (const Family* f : k_families) s += (s.empty() ? "" : ", ") + std::string(f->model_type);
  return s;
}

}  // namespace ft
