// Shared CLI helpers.
#include "cli/args.h"

#include <sys/stat.h>

#include <unistd.h>

#include <charconv>
#include <filesystem>

#include "base/error.h"
#include "engine/progress.h"
#include "io/gguf.h"
#include "model/ft_checkpoint.h"

namespace ft::cli {

std::vector<int32_t> parse_ids(const std::string& s, const char* flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string tok = s.substr(i, j - i);
    while (!tok.empty() && tok.front() == ' ') tok.erase(tok.begin());
    while (!tok.empty() && tok.back() == ' ') tok.pop_back();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (tok.empty() || ec != std::errc() || p != tok.data() + tok.size() || v < 0 ||
        v > INT32_MAX)
      fail("{}: '{}' is not a token id (expected comma-separated non-negative integers)", flag, tok);
    ids.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  if (ids.empty()) fail("{}: no token ids given", flag);
  return ids;
}

void check_ids(const std::vector<int32_t>& ids, int64_t vocab, const char* flag) {
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      fail("{}: token id {} is out of range for this model's vocabulary [0, {})", flag, id, vocab);
}

std::unique_ptr<Model> load_model(const std::string& dir) {
  struct stat st{};
  if (dir.empty()) fail("--model is required");
  if (is_gguf_path(dir)) return Model::load(dir);  // a .gguf file or the first split part
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail("model directory {} does not exist", dir);
  if (is_ft_checkpoint(dir)) {  // one large read: a progress bar when it takes a while
    std::unique_ptr<ProgressBar> bar;
    return Model::load_ftc(dir, [&](size_t done, size_t total) {
      if (total < (size_t{256} << 20)) return;
      if (!bar) bar = std::make_unique<ProgressBar>("loading " + dir, total);
      bar->update(done);
    });
  }
  return Model::load(dir);
}

std::string default_model_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> places{fs::path(FT_SOURCE_DIR) / "models/demo"};
  if (!ec) places.insert(places.begin(), exe.parent_path().parent_path() / "models/demo");
  for (const fs::path& p : places)
    if (fs::exists(p / "config.json")) return p.string();
  fail("no --model given and the embedded demo model (models/demo) is not here; pass --model DIR "
       "(a Hugging Face checkpoint directory)");
}

}  // namespace ft::cli
