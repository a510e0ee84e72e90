// Golden greedy answers of the embedded demo model (models/demo), rendered through its chat
// template and generated on the CPU by ft itself (llama2.c-style end-to-end check). The pinned
// strings were produced by this engine (identical on the scalar, AVX2 and AVX-512 tables, and
// to the transformers greedy samples printed by tools/demo_model/train.py).
#include <gtest/gtest.h>

#include "engine/generate.h"
#include "model/transformer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ft {
namespace {

class DemoModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load(FT_DEMO_MODEL).release();
    tok_ = new Tokenizer(Tokenizer::load(FT_DEMO_MODEL));
    tpl_ = new ChatTemplate(ChatTemplate::load(FT_DEMO_MODEL));
  }
  static void TearDownTestSuite() { delete model_, delete tok_, delete tpl_; }

  // Greedy answer (at most 40 tokens, stopping at <|im_end|>) to one user message.
  std::vector<int32_t> answer_ids(const std::string& question) {
    nlohmann::ordered_json req = {{"messages", {{{"role", "user"}, {"content", question}}}}};
    std::string prompt = tpl_->render(req);
    EXPECT_EQ(prompt, "<|im_start|>user\n" + question + "<|im_end|>\n<|im_start|>assistant\n");
    ThreadPool pool(2, false);
    Transformer tf(*model_, pool);
    GenerateParams p;
    p.max_new_tokens = 40;
    p.stop_ids = model_->config().eos_token_ids;
    return generate(tf, tok_->encode(prompt, false), p);
  }

  static inline Model* model_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
  static inline ChatTemplate* tpl_ = nullptr;
};

TEST_F(DemoModel, ConfigAndSpecialTokens) {
  const auto& c = model_->config();
  EXPECT_EQ(c.n_experts, 8);
  EXPECT_EQ(c.top_k, 2);
  EXPECT_EQ(tok_->token_id("<|im_end|>"), 2);
  ASSERT_EQ(c.eos_token_ids.size(), 1u);
  EXPECT_EQ(c.eos_token_ids[0], 2);
}

TEST_F(DemoModel, GreedyDefinitionIsGolden) {  // runs the full 40 tokens
  auto ids = answer_ids("What does \"apple\" mean?");
  EXPECT_EQ(ids.size(), 40u);
  EXPECT_EQ(tok_->decode(ids, true),
            "As a noun, \"apple\" means a small piece of cloth (usually a piece of cloth or paper "
            "or metal) used to hold or move something. It can also mean a small piece of");
}

TEST_F(DemoModel, GreedyExampleStopsAtImEnd) {
  auto ids = answer_ids("Use \"river\" in a sentence.");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), 2);  // <|im_end|> ends the answer
  EXPECT_EQ(tok_->decode(ids, true), "Here is an example: \"A river\".");
}

}  // namespace
}  // namespace ft
