// Helpers shared by the ft subcommands: id-list parsing, model loading with a clear error.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace ft::cli {

// "1,2,3" -> ids; throws ft::Error naming the flag on a malformed list.
std::vector<int32_t> parse_ids(const std::string& s, const char* flag);
// Throws ft::Error if any id is outside [0, vocab).
void check_ids(const std::vector<int32_t>& ids, int64_t vocab, const char* flag);
std::unique_ptr<Model> load_model(const std::string& dir);
// The embedded demo model: models/demo next to the binary's tree (build/../models/demo) or in
// the source tree it was built from. Throws ft::Error when neither exists.
std::string default_model_dir();

}  // namespace ft::cli
