// Radix prefix tree: page-granular match/insert with node splits, path locks, LRU eviction.
#include "cache/radix_cache.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "base/error.h"

namespace ft {

RadixCache::RadixCache(KvPagePool& pool) : pool_(pool) {}

RadixCache::~RadixCache() {
  std::function<void(Node&)> drop = [&](Node& n) {
    for (auto& [k, c] : n.children) drop(*c);
    for (int32_t p : n.pages) pool_.unref(p);
  };
  drop(root_);
}

std::vector<int32_t> RadixCache::key(std::span<const int32_t> tokens, int64_t at) const {
  return {tokens.begin() + at, tokens.begin() + at + page_tokens()};
}

RadixCache::Node* RadixCache::split(Node* child, int64_t k) {
  const int64_t P = page_tokens();
  Node* parent = child->parent;
  auto it = parent->children.find(key(child->tokens, 0));
  FT_CHECK(it != parent->children.end() && it->second.get() == child);
  std::unique_ptr<Node> lower = std::move(it->second);
  auto upper = std::make_unique<Node>();
  upper->parent = parent;
  upper->tokens.assign(lower->tokens.begin(), lower->tokens.begin() + k * P);
  upper->pages.assign(lower->pages.begin(), lower->pages.begin() + k);
  upper->locks = lower->locks;
  upper->last_use = lower->last_use;
  lower->tokens.erase(lower->tokens.begin(), lower->tokens.begin() + k * P);
  lower->pages.erase(lower->pages.begin(), lower->pages.begin() + k);
  lower->parent = upper.get();
  Node* u = upper.get();
  u->children.emplace(key(lower->tokens, 0), std::move(lower));
  it->second = std::move(upper);
  return u;
}

RadixCache::Match RadixCache::match(std::span<const int32_t> tokens) {
  const int64_t P = page_tokens();
  Match m{.node = &root_};
  ++tick_;
  Node* node = &root_;
  int64_t at = 0;
  while (at + P <= static_cast<int64_t>(tokens.size())) {
    auto it = node->children.find(key(tokens, at));
    if (it == node->children.end()) break;
    Node* c = it->second.get();
    const int64_t n_pages = static_cast<int64_t>(c->pages.size());
    int64_t k = 1;  // the first page matched through the key
    while (k < n_pages && at + (k + 1) * P <= static_cast<int64_t>(tokens.size()) &&
           std::equal(c->tokens.begin() + k * P, c->tokens.begin() + (k + 1) * P,
                      tokens.begin() + at + k * P))
      ++k;
    if (k < n_pages) c = split(c, k);
    c->last_use = tick_;
    m.pages.insert(m.pages.end(), c->pages.begin(), c->pages.end());
    at += k * P;
    node = c;
    if (k < n_pages) break;
  }
  m.node = node;
  m.tokens = at;
  return m;
}

RadixCache::Node* RadixCache::insert(std::span<const int32_t> tokens,
                                     std::span<const int32_t> pages) {
  const int64_t P = page_tokens();
  FT_CHECK(static_cast<int64_t>(pages.size()) * P <= static_cast<int64_t>(tokens.size()));
  Match m = match(tokens.first(pages.size() * P));
  const int64_t have = static_cast<int64_t>(m.pages.size());
  if (have == static_cast<int64_t>(pages.size())) return m.node;
  auto leaf = std::make_unique<Node>();
  leaf->parent = m.node;
  leaf->tokens.assign(tokens.begin() + have * P, tokens.begin() + pages.size() * P);
  leaf->pages.assign(pages.begin() + have, pages.end());
  for (int32_t p : leaf->pages) pool_.ref(p);
  leaf->last_use = tick_;
  Node* l = leaf.get();
  m.node->children.emplace(key(l->tokens, 0), std::move(leaf));
  return l;
}

void RadixCache::lock(Node* node) {
  for (Node* n = node; n && n != &root_; n = n->parent) ++n->locks;
}

void RadixCache::unlock(Node* node) {
  for (Node* n = node; n && n != &root_; n = n->parent) {
    FT_CHECK(n->locks > 0, "unlock of an unlocked node");
    --n->locks;
  }
}

int64_t RadixCache::evict(int64_t n_pages) {
  using Item = std::pair<uint64_t, Node*>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> leaves;
  std::function<void(Node&)> collect = [&](Node& n) {
    for (auto& [k, c] : n.children) collect(*c);
    if (&n != &root_ && n.children.empty() && n.locks == 0) leaves.push({n.last_use, &n});
  };
  collect(root_);
  int64_t dropped = 0;
  while (dropped < n_pages && !leaves.empty()) {
    Node* n = leaves.top().second;
    leaves.pop();
    for (int32_t p : n->pages) pool_.unref(p);
    dropped += static_cast<int64_t>(n->pages.size());
    Node* parent = n->parent;
    parent->children.erase(key(n->tokens, 0));  // destroys n
    if (parent != &root_ && parent->children.empty() && parent->locks == 0)
      leaves.push({parent->last_use, parent});
  }
  evicted_pages_ += dropped;
  return dropped;
}

void RadixCache::remap(const std::vector<int32_t>& map) {
  std::function<void(Node&)> walk = [&](Node& n) {
    for (auto& [k, c] : n.children) {
      for (int32_t& p : c->pages) {
        FT_CHECK(p >= 0 && p < static_cast<int32_t>(map.size()) && map[p] >= 0,
                 "page {} has no new id", p);
        p = map[p];
      }
      walk(*c);
    }
  };
  walk(root_);
}

RadixCache::Stats RadixCache::stats() const {
  Stats s{.evicted_pages = evicted_pages_};
  std::function<void(const Node&)> walk = [&](const Node& n) {
    for (auto& [k, c] : n.children) {
      ++s.nodes;
      s.pages += static_cast<int64_t>(c->pages.size());
      if (c->locks > 0) ++s.locked_nodes;
      walk(*c);
    }
  };
  walk(root_);
  return s;
}

void RadixCache::check_invariants() const {
  const int64_t P = page_tokens();
  std::vector<int32_t> seen(pool_.n_pages(), 0);
  std::function<void(const Node&)> walk = [&](const Node& n) {
    for (auto& [k, c] : n.children) {
      FT_CHECK(c->parent == &n, "child's parent link is wrong");
      FT_CHECK(!c->pages.empty() && static_cast<int64_t>(c->tokens.size()) ==
                                        static_cast<int64_t>(c->pages.size()) * P,
               "edge of {} tokens for {} pages", c->tokens.size(), c->pages.size());
      FT_CHECK(std::equal(k.begin(), k.end(), c->tokens.begin()), "child key is not its page");
      FT_CHECK(c->locks >= 0, "negative lock count");
      if (&n != &root_) FT_CHECK(n.locks >= c->locks, "a node has fewer locks than its child");
      for (int32_t p : c->pages) ++seen[p];
      walk(*c);
    }
  };
  walk(root_);
  for (int64_t p = 0; p < pool_.n_pages(); ++p)
    FT_CHECK(pool_.refcount(p) >= seen[p], "page {}: {} references, {} in the tree", p,
             pool_.refcount(p), seen[p]);
}

}  // namespace ft
