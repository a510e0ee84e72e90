// Shared machinery of the <tool_call>…</tool_call> formats: finds the tags in streaming text,
// holds back partial tags, releases or buffers calls, and falls back to content on bad blocks.
// A format only parses the block body (parse_body).
#pragma once
#include "server/parsers/parsers.h"

namespace ft::server {

class TaggedToolParser : public ToolCallParser {
 public:
  ToolParseResult feed(std::string_view delta) override;
  ToolParseResult finish() override;

 protected:
  explicit TaggedToolParser(bool stream_arguments) : stream_(stream_arguments) {}

  enum class Body { NEED_MORE, CLOSED, MALFORMED };
  // Parses the body after <tool_call> from buf_, consuming what it used (consume()), calling
  // begin_call() once the name is known and add_arguments() as arguments are known. CLOSED:
  // the call is complete (the rest up to </tool_call> is skipped). MALFORMED: not a call of
  // this format; before returning it, a streamed call should leave its arguments valid JSON.
  // final: no more text will come; close leniently if possible.
  virtual Body parse_body(bool final) = 0;
  virtual void reset_body() = 0;  // a new block starts
  // Whole-block fallback for a MALFORMED body, given its text: a call or false (content).
  virtual bool parse_block(std::string_view body, std::string* name, std::string* args) {
    return false;
  }

  void begin_call(std::string name);
  void add_arguments(std::string_view text);
  void consume(size_t n) {
    raw_.append(buf_, 0, n);
    buf_.erase(0, n);
  }

  std::string buf_;  // text not yet consumed

 private:
  enum class Mode { TEXT, BODY, TAIL, BLOCK };
  void run(ToolParseResult& out, bool final);
  void end_call();

  bool stream_;
  Mode mode_ = Mode::TEXT;
  bool strip_leading_ = false;  // drop whitespace after a call
  bool announced_ = false;      // begin_call() ran for the open block
  std::string raw_;             // the open block's consumed text (for the fallback)
  std::string gap_;             // whitespace dropped before the open block (for the fallback)
  std::string name_, args_;     // buffered call (not streaming)
  ToolParseResult* out_ = nullptr;
};

}  // namespace ft::server
