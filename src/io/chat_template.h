// Chat templates: the Jinja template of a Hugging Face tokenizer_config.json ("chat_template")
// that turns a conversation into the text a chat model was trained on, rendered as
// transformers' apply_chat_template(messages, tokenize=False, add_generation_prompt=...) renders
// it (triad-generate --chat).
//
// Note [Chat template subset]: the part of Jinja that chat templates use, rendered as Jinja
// does with transformers' settings (trim_blocks: the newline after a block tag is dropped;
// lstrip_blocks: spaces and tabs before a block tag on its line are dropped; "-" inside a tag
// strips all whitespace on that side):
//   {{ expr }}, {# comment #}, {% if %}/{% elif %}/{% else %}/{% endif %},
//   {% for name in expr %}...{% endfor %} (loop.index, index0, first, last, length; a
//   set inside the loop stays inside it, as in Jinja), {% set name = expr %},
//   {% set name.attr = expr %} on a namespace(...)
//   expressions: string, integer, float, true/false/none literals (also True/False/None),
//   lists, names, a.b, a['b'], a[i], a[i:j] (negative ends count from the end), + - * / %,
//   ~ (string concatenation), == != < > <= >=, in, not in, and, or, not, x if c else y,
//   is [not] defined/none/string/number, filters trim, length, upper, lower, tojson,
//   string methods strip(), lstrip(), rstrip(), startswith(s), endswith(s), upper(), lower(),
//   and the functions raise_exception(message) and namespace(k=v, ...).
// Anything else (macros, other filters or statements) is an Error naming the template's
// source and the position; raise_exception is an Error with its message.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace triad::io {

class ChatTemplate {
 public:
  // Parses `source`; `where` names it in errors ("'DIR/tokenizer_config.json' chat_template").
  ChatTemplate(const std::string& source, const std::string& where);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // The text of the template for `context` (messages: [{"role", "content"}], bos_token,
  // eos_token, add_generation_prompt, ...). A name the context lacks is undefined: false,
  // printed as nothing.
  std::string render(const nlohmann::json& context) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The chat template of the tokenizer in `folder` and its special tokens' text: the template is
// chat_template.jinja when the folder holds one (as transformers 5 saves it), else
// tokenizer_config.json's chat_template (a string, or a list of named templates: the one named
// "default"); bos_token and eos_token are tokenizer_config.json's (a string or {"content":
// ...}; "" when absent). template_source is "" when there is no template. Throws Error naming
// a file that cannot be read or is not a JSON object.
struct ChatTemplateConfig {
  std::string template_source, where, bos_token, eos_token;  // where: the template's file, for errors
};
ChatTemplateConfig read_chat_template_config(const std::string& folder);

}  // namespace triad::io
