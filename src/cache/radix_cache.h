// Radix prefix tree over token ids at page granularity: each edge holds whole pages of tokens
// and the KV pages that store them. Match, insert, lock (pins a path against eviction) and LRU
// eviction of unlocked leaves; the tree holds one page reference per page it stores.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "cache/kv_pages.h"

namespace ft {

class RadixCache {
 public:
  struct Node {
    Node* parent = nullptr;
    std::vector<int32_t> tokens;  // the edge from parent: a whole number of pages
    std::vector<int32_t> pages;   // [tokens.size() / page_tokens]
    std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;  // keyed by first page
    int32_t locks = 0;  // requests pinning this node (and so its ancestors)
    uint64_t last_use = 0;
  };
  struct Match {
    Node* node;                  // deepest node of the matched prefix (root when none)
    int64_t tokens = 0;          // matched tokens, a multiple of page_tokens
    std::vector<int32_t> pages;  // the matched pages, in order
  };
  struct Stats {
    int64_t nodes = 0, pages = 0, locked_nodes = 0, evicted_pages = 0;
  };

  explicit RadixCache(KvPagePool& pool);
  ~RadixCache();  // gives every page reference back
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  // Longest cached prefix of tokens in whole pages; marks the path used (LRU). A node matched
  // in part is split so that the returned node ends exactly at the match.
  Match match(std::span<const int32_t> tokens);
  // Stores the first pages.size() pages of tokens. Pages of a prefix already in the tree are
  // kept (the caller's are not referenced); new ones get a reference held by the tree. The
  // caller keeps (and later drops) its own references. Returns the node ending at the prefix.
  Node* insert(std::span<const int32_t> tokens, std::span<const int32_t> pages);
  // Pins node and its ancestors against eviction; unlock undoes one lock.
  void lock(Node* node);
  void unlock(Node* node);
  // Drops unlocked leaves, least recently used first, until n_pages pages were dropped or
  // nothing unlocked is left. Returns the number of pages dropped.
  int64_t evict(int64_t n_pages);
  // Renames every stored page p to map[p] (after KvPagePool::resize compacted the pool).
  void remap(const std::vector<int32_t>& map);

  Stats stats() const;
  int64_t page_tokens() const { return pool_.page_tokens(); }
  const Node& root() const { return root_; }
  // Aborts if a page is referenced by the tree less often than it appears, a lock count is
  // negative or below a child's, or an edge is not whole pages.
  void check_invariants() const;

 private:
  std::vector<int32_t> key(std::span<const int32_t> tokens, int64_t at) const;
  // Splits child (an edge of n pages) after its first k pages; returns the new upper node.
  Node* split(Node* child, int64_t k);

  KvPagePool& pool_;
  Node root_;
  uint64_t tick_ = 0;
  int64_t evicted_pages_ = 0;
};

}  // namespace ft
