// KV page pool: allocation, reference counts and the free list.
#include "cache/kv_pages.h"

#include <algorithm>

#include "base/error.h"

namespace ft {

KvPagePool::KvPagePool(int64_t n_pages, int64_t page_tokens, int64_t n_layers, int64_t kv_dim)
    : page_tokens_(page_tokens),
      n_layers_(n_layers),
      kv_dim_(kv_dim),
      page_floats_(2 * n_layers * page_tokens * kv_dim),
      refs_(n_pages, 0) {
  FT_CHECK(n_pages >= 0 && page_tokens > 0 && n_layers >= 0 && kv_dim > 0);
  data_.reset(new float[n_pages * page_floats_]);
  free_.reserve(n_pages);
  for (int64_t p = n_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

int32_t KvPagePool::alloc() {
  if (free_.empty()) return -1;
  const int32_t p = free_.back();
  free_.pop_back();
  FT_CHECK(refs_[p] == 0, "page {} on the free list has {} references", p, refs_[p]);
  refs_[p] = 1;
  return p;
}

void KvPagePool::ref(int32_t page) {
  FT_CHECK(page >= 0 && page < n_pages() && refs_[page] > 0, "ref of free page {}", page);
  ++refs_[page];
}

void KvPagePool::unref(int32_t page) {
  FT_CHECK(page >= 0 && page < n_pages() && refs_[page] > 0, "unref of free page {}", page);
  if (--refs_[page] == 0) free_.push_back(page);
}

std::vector<int32_t> KvPagePool::resize(int64_t n_pages) {
  FT_CHECK(n_pages >= n_used(), "resize to {} pages with {} in use", n_pages, n_used());
  std::unique_ptr<float[]> data(new float[n_pages * page_floats_]);
  std::vector<int32_t> map(refs_.size(), -1), refs(n_pages, 0);
  int32_t next = 0;
  for (size_t p = 0; p < refs_.size(); ++p) {
    if (refs_[p] == 0) continue;
    std::copy_n(data_.get() + p * page_floats_, page_floats_, data.get() + next * page_floats_);
    refs[next] = refs_[p];
    map[p] = next++;
  }
  data_ = std::move(data);
  refs_ = std::move(refs);
  free_.clear();
  for (int64_t p = n_pages - 1; p >= next; --p) free_.push_back(static_cast<int32_t>(p));
  return map;
}

float* KvPagePool::at(int32_t page, int kv, int64_t layer) const {
  FT_CHECK(page >= 0 && page < n_pages() && layer >= 0 && layer < n_layers_);
  return data_.get() + page * page_floats_ + (kv * n_layers_ + layer) * page_tokens_ * kv_dim_;
}

}  // namespace ft
