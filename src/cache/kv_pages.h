// KV page pool: fixed-size pages of page_tokens positions for every attention layer, with
// reference counts and a free list. The prefix cache's radix tree and its users share pages.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ft {

class KvPagePool {
 public:
  // n_pages pages, each holding k and v for page_tokens positions of n_layers attention layers
  // of width kv_dim: data [n_pages][2][n_layers][page_tokens][kv_dim] f32.
  KvPagePool(int64_t n_pages, int64_t page_tokens, int64_t n_layers, int64_t kv_dim);

  // A free page with refcount 1, or -1 when none is free.
  int32_t alloc();
  void ref(int32_t page);
  // Drops one reference; the page returns to the free list at zero.
  void unref(int32_t page);
  int32_t refcount(int32_t page) const { return refs_[page]; }

  // k / v of page for layer (an index among attention layers): [page_tokens, kv_dim].
  float* k(int32_t page, int64_t layer) { return at(page, 0, layer); }
  float* v(int32_t page, int64_t layer) { return at(page, 1, layer); }
  const float* k(int32_t page, int64_t layer) const { return at(page, 0, layer); }
  const float* v(int32_t page, int64_t layer) const { return at(page, 1, layer); }

  int64_t n_pages() const { return static_cast<int64_t>(refs_.size()); }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t n_used() const { return n_pages() - n_free(); }
  int64_t page_tokens() const { return page_tokens_; }
  int64_t page_floats() const { return page_floats_; }
  size_t bytes() const { return n_pages() * page_floats_ * sizeof(float); }
  size_t page_bytes() const { return page_floats_ * sizeof(float); }

  // Re-sizes the pool to n_pages (>= n_used()), compacting the used pages to ids [0, n_used)
  // in id order with their data and reference counts. Returns old id -> new id (-1: was free).
  // The new block is allocated first: on failure (std::bad_alloc) nothing changed.
  std::vector<int32_t> resize(int64_t n_pages);

 private:
  float* at(int32_t page, int kv, int64_t layer) const;

  int64_t page_tokens_, n_layers_, kv_dim_, page_floats_;
  std::vector<int32_t> refs_;  // [n_pages]
  std::vector<int32_t> free_;  // stack of free page ids
  // Left uninitialised: the OS commits a page's memory when it is first written.
  std::unique_ptr<float[]> data_;
};

}  // namespace ft
