// ft ctl: a client for a running `ft serve` — health, stats, cache pools (and live resize),
// recent requests, raw generation. Human tables by default, the server's JSON with --json.
#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/error.h"
#include "cli/commands.h"

namespace ft::cli {

namespace {
using nlohmann::json;

struct CtlOptions {
  std::string base_url = "http://127.0.0.1:1919";
  std::string api_key;
  bool json_out = false;
  double timeout_s = 600;
  // generate
  std::string text;
  int64_t max_tokens = 64;
  double temperature = 0;
  // cache
  int64_t moe = -1, kv = -1, state = -1, prefix = -1;
  double wait_s = 0;
};

// One HTTP exchange; returns the parsed JSON body of a 2xx answer, else throws ft::Error with
// the server's error message (OpenAI or Anthropic shape) or the transport failure.
json call(const CtlOptions& o, const std::string& method, const std::string& path,
          const json* body = nullptr, bool allow_non_2xx = false, int* status = nullptr) {
  if (o.base_url.rfind("http://", 0) != 0)
    fail("--base-url must start with http:// (got '{}')", o.base_url);
  httplib::Client cli(o.base_url);
  cli.set_connection_timeout(5);
  const auto t = std::chrono::duration<double>(o.timeout_s);
  cli.set_read_timeout(std::chrono::duration_cast<std::chrono::seconds>(t).count(), 0);
  httplib::Headers headers;
  if (!o.api_key.empty()) headers.emplace("Authorization", "Bearer " + o.api_key);
  httplib::Result res = method == "GET"
                            ? cli.Get(path, headers)
                            : cli.Post(path, headers, body ? body->dump() : "{}", "application/json");
  if (!res)
    fail("cannot reach {}{}: {} (is `ft serve` running there? see --base-url)", o.base_url, path,
         httplib::to_string(res.error()));
  if (status) *status = res->status;
  json j = json::parse(res->body, nullptr, false);
  if (res->status == 404 && (j.is_discarded() || !j.contains("error")))
    fail("{} has no {} (an older or different server?)", o.base_url, path);
  if ((res->status < 200 || res->status >= 300) && !allow_non_2xx) {
    std::string msg = res->body.substr(0, 300);
    if (!j.is_discarded() && j.contains("error")) {
      const json& e = j["error"];
      msg = e.is_object() ? e.value("message", e.dump()) : e.dump();
    }
    fail("{} {} answered {}: {}", method, path, res->status, msg);
  }
  if (j.is_discarded()) fail("{} {} answered with non-JSON: {}", method, path, res->body.substr(0, 200));
  return j;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

std::string cell(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:.4g}", v.get<double>());
  return v.dump();
}

// Flattens nested objects into "a.b: value" lines.
void print_tree(const json& j, const std::string& prefix = "") {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      print_tree(*it, key);
    } else if (key.size() > 6 && key.compare(key.size() - 6, 6, "_bytes") == 0 && it->is_number()) {
      fmt::print("{:<36} {}\n", key, human_bytes(it->get<double>()));
    } else {
      fmt::print("{:<36} {}\n", key, cell(*it));
    }
  }
}

void print_table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    w[c] = head[c].size();
    for (const auto& r : rows) w[c] = std::max(w[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t c = 0; c < r.size(); ++c) s += fmt::format("{:<{}}  ", r[c], w[c]);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    fmt::print("{}\n", s);
  };
  line(head);
  for (const auto& r : rows) line(r);
}

void cmd_health(const CtlOptions& o) {
  int status = 0;
  const json j = call(o, "GET", "/health", nullptr, true, &status);
  if (o.json_out) fmt::print("{}\n", j.dump());
  else fmt::print("{} ({})\n", j.value("status", "?"), j.value("phase", "?"));
  if (status != 200) fail("the server is not ready: {}", j.value("phase", j.dump()));
}

void cmd_stats(const CtlOptions& o) {
  const json j = call(o, "GET", "/v1/stats");
  if (o.json_out) fmt::print("{}\n", j.dump(2));
  else print_tree(j);
}

void cmd_requests(const CtlOptions& o) {
  const json j = call(o, "GET", "/v1/requests");
  if (o.json_out) return fmt::print("{}\n", j.dump(2));
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : j.value("data", json::array()))
    rows.push_back({cell(r["id"]), cell(r["api"]), cell(r["prompt_tokens"]),
                    cell(r["completion_tokens"]), cell(r["finish_reason"]),
                    fmt::format("{:.3f}", r.value("ttft_s", 0.0)),
                    fmt::format("{:.3f}", r.value("total_s", 0.0))});
  print_table({"id", "api", "prompt", "completion", "finish", "ttft_s", "total_s"}, rows);
}

void cmd_generate(const CtlOptions& o) {
  if (o.text.empty()) fail("give the text to continue: ft ctl generate \"Once upon a time\"");
  const json body = {{"text", o.text},
                     {"sampling_params",
                      {{"max_new_tokens", o.max_tokens}, {"temperature", o.temperature}}}};
  const json j = call(o, "POST", "/generate", &body);
  if (o.json_out) fmt::print("{}\n", j.dump());
  else fmt::print("{}\n", j.value("text", ""));
}

void print_cache(const json& j) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : j.value("pools", json::array()))
    rows.push_back({cell(p["name"]), cell(p["unit"]), cell(p["size"]), cell(p["used"]),
                    cell(p.value("min", json())), cell(p.value("max", json())),
                    p.contains("bytes") && p["bytes"].is_number() ? human_bytes(p["bytes"].get<double>())
                                                                   : "-"});
  print_table({"pool", "unit", "size", "used", "min", "max", "bytes"}, rows);
  for (const char* k : {"budget_bytes", "used_bytes", "free_vram_bytes"})
    if (j.contains(k) && j[k].is_number()) fmt::print("{:<16} {}\n", k, human_bytes(j[k].get<double>()));
  if (j.contains("pending") && !j["pending"].is_null()) fmt::print("pending          {}\n", j["pending"].dump());
}

void cmd_cache(const CtlOptions& o) {
  const bool resize = o.moe >= 0 || o.kv >= 0 || o.state >= 0 || o.prefix >= 0;
  if (!resize) {
    const json j = call(o, "GET", "/v1/cache/status");
    if (o.json_out) return fmt::print("{}\n", j.dump(2));
    return print_cache(j);
  }
  json body = json::object();
  if (o.moe >= 0) body["moe_slots"] = o.moe;
  if (o.kv >= 0) body["kv_tokens"] = o.kv;
  if (o.state >= 0) body["state_slots"] = o.state;
  if (o.prefix >= 0) body["prefix_tokens"] = o.prefix;
  if (o.wait_s > 0) body["wait_s"] = o.wait_s;
  const json j = call(o, "POST", "/v1/cache/rebuild", &body);
  if (o.json_out) return fmt::print("{}\n", j.dump(2));
  fmt::print("{}\n", j.value("status", "accepted"));
  if (j.contains("pools")) print_cache(j);
}
}  // namespace

void add_ctl_command(CLI::App& app) {
  auto o = std::make_shared<CtlOptions>();
  auto* ctl = app.add_subcommand("ctl", "Talk to a running ft serve (health, stats, cache, ...)");
  ctl->require_subcommand(1);
  ctl->add_option("--base-url", o->base_url, "Server address")->capture_default_str();
  ctl->add_option("--api-key", o->api_key, "Key the server was started with");
  ctl->add_flag("--json", o->json_out, "Print the server's JSON");
  ctl->add_option("--timeout", o->timeout_s, "Seconds to wait for an answer")
      ->check(CLI::PositiveNumber)->capture_default_str();
  ctl->add_subcommand("health", "Is the server up and the model loaded?")
      ->callback([o] { cmd_health(*o); });
  ctl->add_subcommand("stats", "Engine throughput, queue, memory, expert cache")
      ->callback([o] { cmd_stats(*o); });
  ctl->add_subcommand("requests", "Recently finished requests")->callback([o] { cmd_requests(*o); });
  auto* gen = ctl->add_subcommand("generate", "Continue a text (no chat template)");
  gen->add_option("text", o->text, "Text to continue")->required();
  gen->add_option("-n,--max-tokens", o->max_tokens, "Tokens to generate")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  gen->add_option("--temperature", o->temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0))->capture_default_str();
  gen->callback([o] { cmd_generate(*o); });
  auto* cache = ctl->add_subcommand("cache", "Show the memory pools, or resize them live");
  cache->add_option("--moe", o->moe, "Expert-cache slots to resize to")->check(CLI::NonNegativeNumber);
  cache->add_option("--kv", o->kv, "KV tokens to resize to")->check(CLI::NonNegativeNumber);
  cache->add_option("--prefix", o->prefix, "Prefix-cache KV tokens to resize to")
      ->check(CLI::NonNegativeNumber);
  cache->add_option("--state", o->state, "Recurrent-state snapshots to resize to")
      ->check(CLI::NonNegativeNumber);
  cache->add_option("--wait", o->wait_s, "Wait up to S seconds for the resize to be applied")
      ->check(CLI::NonNegativeNumber);
  cache->callback([o] { cmd_cache(*o); });
}

}  // namespace ft::cli
