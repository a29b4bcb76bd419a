#include "io/chat_template.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <vector>

#include "tensor/error.h"

namespace triad::io {

namespace {

using json = nlohmann::json;

const json kUndefined = json(json::value_t::discarded);

bool undefined(const json& v) { return v.is_discarded(); }

bool truthy(const json& v) {
  if (v.is_discarded() || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string() || v.is_array() || v.is_object()) return !v.empty();
  return false;
}

std::string text_of(const json& v) {
  if (v.is_discarded()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());
    return buf;
  }
  return v.dump();
}

std::string strip(const std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size();
  while (left && b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (right && e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// ---- expressions ----

struct Expr {
  enum Kind { Literal, Name, Attr, Index, Slice, Call, Filter, Test, Unary, Binary, Cond, List } kind;
  json value;                               // Literal
  std::string name;                         // Name, Attr, Call (method or function), Filter, Test, operator
  std::vector<std::unique_ptr<Expr>> args;  // operands, call arguments
  std::vector<std::string> keywords;        // Call: the name of each argument ("" positional)
  bool negated = false;                     // Test
  bool method = false;                      // Call: args[0] is the string whose method it is
};
using ExprPtr = std::unique_ptr<Expr>;

struct Token {
  enum Kind { Ident, String, Number, Op, End } kind;
  std::string text;
  json value;
};

class ExprParser {
 public:
  ExprParser(const std::string& src, std::function<void(const std::string&)> fail) : fail_(std::move(fail)) {
    lex(src);
  }
  ExprPtr parse_all() {
    ExprPtr e = expr();
    if (peek().kind != Token::End) fail_("unexpected '" + peek().text + "'");
    return e;
  }
  // For the statement parser: a name, an operator or keyword, the end.
  bool at_end() const { return peek().kind == Token::End; }
  std::string ident() {
    if (peek().kind != Token::Ident) fail_("expected a name, found '" + peek().text + "'");
    return tokens_[pos_++].text;
  }
  bool accept(const std::string& op) {
    if (peek().kind != Token::String && peek().text == op) return ++pos_, true;
    return false;
  }
  void expect(const std::string& op) {
    if (!accept(op)) fail_("expected '" + op + "', found '" + peek().text + "'");
  }
  ExprPtr expr() {
    ExprPtr e = or_expr();
    if (peek().kind == Token::Ident && peek().text == "if") {
      ++pos_;
      ExprPtr cond = or_expr();
      ExprPtr other = accept("else") ? expr() : literal(kUndefined);
      return node(Expr::Cond, "", std::move(e), std::move(cond), std::move(other));
    }
    return e;
  }

 private:
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::function<void(const std::string&)> fail_;

  const Token& peek() const { return tokens_[pos_]; }

  void lex(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
      const char c = s[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = i;
        while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
        tokens_.push_back({Token::Ident, s.substr(i, j - i), {}});
        i = j;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t j = i;
        bool real = false;
        while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) real |= s[j++] == '.';
        const std::string t = s.substr(i, j - i);
        tokens_.push_back({Token::Number, t, real ? json(std::stod(t)) : json(std::stoll(t))});
        i = j;
      } else if (c == '\'' || c == '"') {
        std::string out;
        size_t j = i + 1;
        for (; j < s.size() && s[j] != c; ++j) {
          if (s[j] != '\\' || j + 1 == s.size()) {
            out += s[j];
            continue;
          }
          const char e = s[++j];
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        }
        if (j == s.size()) fail_("a string is not closed");
        tokens_.push_back({Token::String, out, json(out)});
        i = j + 1;
      } else {
        static const char* kOps[] = {"==", "!=", "<=", ">=", "(", ")", "[", "]", ".", ",", "|", "+",
                                     "-",  "*",  "/",  "%",  "~", "<", ">", "=", ":", "{", "}"};
        bool found = false;
        for (const char* op : kOps) {
          const std::string o = op;
          if (s.compare(i, o.size(), o) == 0) {
            tokens_.push_back({Token::Op, o, {}});
            i += o.size();
            found = true;
            break;
          }
        }
        if (!found) fail_(std::string("unexpected character '") + c + "'");
      }
    }
    tokens_.push_back({Token::End, "end of expression", {}});
  }

  static ExprPtr literal(json v) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Literal;
    e->value = std::move(v);
    return e;
  }
  static ExprPtr node(Expr::Kind kind, std::string name, ExprPtr a = nullptr, ExprPtr b = nullptr,
                      ExprPtr c = nullptr) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->name = std::move(name);
    for (ExprPtr* p : {&a, &b, &c})
      if (*p) e->args.push_back(std::move(*p));
    return e;
  }
  bool at_word(const char* w) const { return peek().kind == Token::Ident && peek().text == w; }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (at_word("or")) ++pos_, e = node(Expr::Binary, "or", std::move(e), and_expr());
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (at_word("and")) ++pos_, e = node(Expr::Binary, "and", std::move(e), not_expr());
    return e;
  }
  ExprPtr not_expr() {
    if (at_word("not")) return ++pos_, node(Expr::Unary, "not", not_expr());
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = concat();
    for (;;) {
      if (peek().kind == Token::Op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                       peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        const std::string op = tokens_[pos_++].text;
        e = node(Expr::Binary, op, std::move(e), concat());
      } else if (at_word("in")) {
        ++pos_;
        e = node(Expr::Binary, "in", std::move(e), concat());
      } else if (at_word("not") && tokens_[pos_ + 1].text == "in") {
        pos_ += 2;
        e = node(Expr::Unary, "not", node(Expr::Binary, "in", std::move(e), concat()));
      } else if (at_word("is")) {
        ++pos_;
        const bool negated = at_word("not") ? (++pos_, true) : false;
        e = node(Expr::Test, ident(), std::move(e));
        e->negated = negated;
      } else {
        return e;
      }
    }
  }
  ExprPtr concat() {
    ExprPtr e = additive();
    while (accept("~")) e = node(Expr::Binary, "~", std::move(e), additive());
    return e;
  }
  ExprPtr additive() {
    ExprPtr e = multiplicative();
    while (peek().kind == Token::Op && (peek().text == "+" || peek().text == "-")) {
      const std::string op = tokens_[pos_++].text;
      e = node(Expr::Binary, op, std::move(e), multiplicative());
    }
    return e;
  }
  ExprPtr multiplicative() {
    ExprPtr e = unary();
    while (peek().kind == Token::Op && (peek().text == "*" || peek().text == "/" || peek().text == "%")) {
      const std::string op = tokens_[pos_++].text;
      e = node(Expr::Binary, op, std::move(e), unary());
    }
    return e;
  }
  ExprPtr unary() {
    if (peek().kind == Token::Op && peek().text == "-") return ++pos_, node(Expr::Unary, "-", unary());
    return postfix(primary());
  }
  void call_args(Expr& call) {
    while (!accept(")")) {
      if (!call.args.empty()) expect(",");
      std::string keyword;
      if (peek().kind == Token::Ident && tokens_[pos_ + 1].text == "=") keyword = ident(), expect("=");
      call.keywords.push_back(keyword);
      call.args.push_back(expr());
    }
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (accept(".")) {
        const std::string name = ident();
        if (accept("(")) {
          e = node(Expr::Call, name, std::move(e));
          e->method = true;
          e->keywords.push_back("");
          call_args(*e);
        } else {
          e = node(Expr::Attr, name, std::move(e));
        }
      } else if (accept("[")) {
        ExprPtr from = peek().text == ":" ? literal(nullptr) : expr();
        if (accept(":")) {
          ExprPtr to = peek().text == "]" ? literal(nullptr) : expr();
          e = node(Expr::Slice, "", std::move(e), std::move(from), std::move(to));
        } else {
          e = node(Expr::Index, "", std::move(e), std::move(from));
        }
        expect("]");
      } else if (accept("|")) {
        e = node(Expr::Filter, ident(), std::move(e));
        if (accept("(")) {
          e->keywords.push_back("");
          call_args(*e);
        }
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    const Token t = peek();
    if (t.kind == Token::String || t.kind == Token::Number) return ++pos_, literal(t.value);
    if (accept("(")) {
      ExprPtr e = expr();
      expect(")");
      return e;
    }
    if (accept("[")) {
      ExprPtr list = node(Expr::List, "");
      while (!accept("]")) {
        if (!list->args.empty()) expect(",");
        list->args.push_back(expr());
      }
      return list;
    }
    if (t.kind != Token::Ident) fail_("unexpected '" + t.text + "'");
    ++pos_;
    if (t.text == "true" || t.text == "True") return literal(true);
    if (t.text == "false" || t.text == "False") return literal(false);
    if (t.text == "none" || t.text == "None") return literal(nullptr);
    if (accept("(")) {
      ExprPtr call = node(Expr::Call, t.text);
      call_args(*call);
      return call;
    }
    return node(Expr::Name, t.text);
  }
};

// ---- statements ----

struct Stmt {
  enum Kind { Text, Output, If, For, Set } kind;
  std::string text;                       // Text; For: the loop variable; Set: the name
  std::string attr;                       // Set: name.attr
  std::vector<ExprPtr> exprs;             // Output: [e]; If: the conditions; For: [iterable]; Set: [value]
  std::vector<std::vector<Stmt>> bodies;  // If: one per condition, then else; For: [body]
};

}  // namespace

struct ChatTemplate::Impl {
  std::string where;
  std::vector<Stmt> body;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(where + ": " + what + " (triad renders the Jinja subset of io/chat_template.h)");
  }

  // The scopes, innermost last: the context, then each for loop's.
  using Scopes = std::vector<json>;

  json lookup(const Scopes& scopes, const std::string& name) const {
    for (auto s = scopes.rbegin(); s != scopes.rend(); ++s)
      if (s->contains(name)) return (*s)[name];
    return kUndefined;
  }

  json eval(const Expr& e, Scopes& scopes) const {
    switch (e.kind) {
      case Expr::Literal:
        return e.value;
      case Expr::Name:
        return lookup(scopes, e.name);
      case Expr::List: {
        json out = json::array();
        for (const ExprPtr& a : e.args) out.push_back(eval(*a, scopes));
        return out;
      }
      case Expr::Attr: {
        const json v = eval(*e.args[0], scopes);
        return v.is_object() && v.contains(e.name) ? v[e.name] : kUndefined;
      }
      case Expr::Index: {
        const json v = eval(*e.args[0], scopes), k = eval(*e.args[1], scopes);
        if (v.is_object() && k.is_string())
          return v.contains(k.get<std::string>()) ? v[k.get<std::string>()] : kUndefined;
        if ((v.is_array() || v.is_string()) && k.is_number_integer()) {
          const int64_t n = v.is_array() ? int64_t(v.size()) : int64_t(v.get<std::string>().size());
          int64_t i = k.get<int64_t>();
          if (i < 0) i += n;
          if (i < 0 || i >= n) return kUndefined;
          return v.is_array() ? v[size_t(i)] : json(v.get<std::string>().substr(size_t(i), 1));
        }
        return kUndefined;
      }
      case Expr::Slice: {
        const json v = eval(*e.args[0], scopes), a = eval(*e.args[1], scopes), b = eval(*e.args[2], scopes);
        if (!v.is_array() && !v.is_string()) fail("only a list or string can be sliced");
        const int64_t n = v.is_array() ? int64_t(v.size()) : int64_t(v.get<std::string>().size());
        const auto end = [&](const json& x, int64_t dflt) {
          if (!x.is_number_integer()) return dflt;
          int64_t i = x.get<int64_t>();
          if (i < 0) i += n;
          return std::clamp<int64_t>(i, 0, n);
        };
        const int64_t from = end(a, 0), to = std::max(from, end(b, n));
        if (v.is_string()) return v.get<std::string>().substr(size_t(from), size_t(to - from));
        return json(std::vector<json>(v.begin() + from, v.begin() + to));
      }
      case Expr::Unary: {
        const json v = eval(*e.args[0], scopes);
        if (e.name == "not") return !truthy(v);
        if (!v.is_number()) fail("'-' of a " + std::string(v.type_name()));
        return v.is_number_integer() ? json(-v.get<int64_t>()) : json(-v.get<double>());
      }
      case Expr::Binary:
        return binary(e, scopes);
      case Expr::Cond:
        return truthy(eval(*e.args[1], scopes)) ? eval(*e.args[0], scopes) : eval(*e.args[2], scopes);
      case Expr::Test: {
        const json v = eval(*e.args[0], scopes);
        bool r = false;
        if (e.name == "defined")
          r = !undefined(v);
        else if (e.name == "undefined")
          r = undefined(v);
        else if (e.name == "none")
          r = v.is_null();
        else if (e.name == "string")
          r = v.is_string();
        else if (e.name == "number")
          r = v.is_number();
        else
          fail("the test 'is " + e.name + "' is not supported");
        return r != e.negated;
      }
      case Expr::Filter:
        return filter(e, scopes);
      case Expr::Call:
        return call(e, scopes);
    }
    return kUndefined;
  }

  json binary(const Expr& e, Scopes& scopes) const {
    if (e.name == "and") {
      const json a = eval(*e.args[0], scopes);
      return truthy(a) ? eval(*e.args[1], scopes) : a;
    }
    if (e.name == "or") {
      const json a = eval(*e.args[0], scopes);
      return truthy(a) ? a : eval(*e.args[1], scopes);
    }
    const json a = eval(*e.args[0], scopes), b = eval(*e.args[1], scopes);
    if (e.name == "~") return text_of(a) + text_of(b);
    if (e.name == "==") return a == b || (undefined(a) && undefined(b));
    if (e.name == "!=") return !(a == b || (undefined(a) && undefined(b)));
    if (e.name == "in") {
      if (b.is_string() && a.is_string()) return b.get<std::string>().find(a.get<std::string>()) != std::string::npos;
      if (b.is_object() && a.is_string()) return b.contains(a.get<std::string>());
      if (b.is_array()) return std::find(b.begin(), b.end(), a) != b.end();
      fail("'in' of a " + std::string(b.type_name()));
    }
    if (e.name == "+" && a.is_string() && b.is_string()) return a.get<std::string>() + b.get<std::string>();
    if (e.name == "+" && a.is_array() && b.is_array()) {
      json out = a;
      out.insert(out.end(), b.begin(), b.end());
      return out;
    }
    if (!a.is_number() || !b.is_number()) fail("'" + e.name + "' of a " + a.type_name() + " and a " + b.type_name());
    const bool ints = a.is_number_integer() && b.is_number_integer();
    const double x = a.get<double>(), y = b.get<double>();
    if (e.name == "<") return x < y;
    if (e.name == ">") return x > y;
    if (e.name == "<=") return x <= y;
    if (e.name == ">=") return x >= y;
    if (e.name == "/") return x / y;
    if (ints) {
      const int64_t i = a.get<int64_t>(), j = b.get<int64_t>();
      if (e.name == "+") return i + j;
      if (e.name == "-") return i - j;
      if (e.name == "*") return i * j;
      if (e.name == "%") {
        if (j == 0) fail("'%' by zero");
        return ((i % j) + j) % j;
      }
    }
    if (e.name == "+") return x + y;
    if (e.name == "-") return x - y;
    if (e.name == "*") return x * y;
    return std::fmod(x, y);
  }

  json filter(const Expr& e, Scopes& scopes) const {
    const json v = eval(*e.args[0], scopes);
    if (e.name == "trim") return strip(text_of(v), true, true);
    if (e.name == "upper" || e.name == "lower") {
      std::string s = text_of(v);
      for (char& c : s) c = char(e.name == "upper" ? std::toupper(c) : std::tolower(c));
      return s;
    }
    if (e.name == "length") {
      if (v.is_string()) return v.get<std::string>().size();
      if (v.is_array() || v.is_object()) return v.size();
      fail("'length' of a " + std::string(v.type_name()));
    }
    if (e.name == "tojson") return v.dump();
    fail("the filter '" + e.name + "' is not supported");
  }

  json call(const Expr& e, Scopes& scopes) const {
    if (!e.method && e.name == "raise_exception") {
      const std::string message = e.args.empty() ? "" : text_of(eval(*e.args[0], scopes));
      throw Error(where + " raised: " + message);
    }
    if (!e.method && e.name == "namespace") {
      json ns = json::object();
      for (size_t i = 0; i < e.args.size(); ++i) {
        if (e.keywords[i].empty()) fail("namespace() takes name=value arguments");
        ns[e.keywords[i]] = eval(*e.args[i], scopes);
      }
      return ns;
    }
    if (!e.method) fail("the function '" + e.name + "' is not supported");
    const json self = eval(*e.args[0], scopes);
    if (!self.is_string()) fail("the method '" + e.name + "' of a " + std::string(self.type_name()));
    const std::string s = self.get<std::string>();
    const std::string arg = e.args.size() > 1 ? text_of(eval(*e.args[1], scopes)) : "";
    if (e.name == "strip") return strip(s, true, true);
    if (e.name == "lstrip") return strip(s, true, false);
    if (e.name == "rstrip") return strip(s, false, true);
    if (e.name == "startswith") return s.starts_with(arg);
    if (e.name == "endswith") return s.ends_with(arg);
    if (e.name == "upper" || e.name == "lower") {
      std::string t = s;
      for (char& c : t) c = char(e.name == "upper" ? std::toupper(c) : std::tolower(c));
      return t;
    }
    fail("the string method '" + e.name + "' is not supported");
  }

  void run(const std::vector<Stmt>& stmts, Scopes& scopes, std::string& out) const {
    for (const Stmt& s : stmts) {
      switch (s.kind) {
        case Stmt::Text:
          out += s.text;
          break;
        case Stmt::Output:
          out += text_of(eval(*s.exprs[0], scopes));
          break;
        case Stmt::If: {
          size_t i = 0;
          while (i < s.exprs.size() && !truthy(eval(*s.exprs[i], scopes))) ++i;
          if (i < s.bodies.size()) run(s.bodies[i], scopes, out);
          break;
        }
        case Stmt::For: {
          const json items = eval(*s.exprs[0], scopes);
          if (undefined(items) || items.is_null()) break;
          if (!items.is_array()) fail("a for loop over a " + std::string(items.type_name()));
          const int64_t n = int64_t(items.size());
          for (int64_t i = 0; i < n; ++i) {
            scopes.push_back({{s.text, items[size_t(i)]},
                              {"loop",
                               {{"index", i + 1},
                                {"index0", i},
                                {"first", i == 0},
                                {"last", i == n - 1},
                                {"length", n},
                                {"revindex", n - i},
                                {"revindex0", n - i - 1}}}});
            run(s.bodies[0], scopes, out);
            scopes.pop_back();
          }
          break;
        }
        case Stmt::Set: {
          json value = eval(*s.exprs[0], scopes);
          if (s.attr.empty()) {
            scopes.back()[s.text] = std::move(value);
            break;
          }
          auto scope = scopes.rbegin();
          while (scope != scopes.rend() && !scope->contains(s.text)) ++scope;
          if (scope == scopes.rend() || !(*scope)[s.text].is_object())
            fail("set " + s.text + "." + s.attr + ": '" + s.text + "' is not a namespace");
          (*scope)[s.text][s.attr] = std::move(value);
          break;
        }
      }
    }
  }

  // Parses the template into statements.
  void parse(const std::string& src) {
    struct Piece {
      enum Kind { Text, Output, Block } kind;
      std::string text;
      size_t at;
    };
    std::vector<Piece> pieces;
    size_t i = 0;
    bool trim_next = false;    // the previous tag ended with "-": the text's leading whitespace goes
    bool after_block = false;  // the previous tag was a block or comment: its newline goes (trim_blocks)
    while (i <= src.size()) {
      size_t tag = src.find('{', i);  // the next "{{", "{%" or "{#"
      while (tag != std::string::npos && tag + 1 < src.size() && src[tag + 1] != '{' && src[tag + 1] != '%' &&
             src[tag + 1] != '#')
        tag = src.find('{', tag + 1);
      if (tag + 1 >= src.size()) tag = std::string::npos;
      std::string text = src.substr(i, tag == std::string::npos ? std::string::npos : tag - i);
      bool line_start = i == 0 || src[i - 1] == '\n';
      if (trim_next) {
        text = strip(text, true, false);
      } else if (after_block && text.starts_with("\n")) {
        text = text.substr(1);
        line_start = true;
      }
      trim_next = after_block = false;
      if (tag == std::string::npos) {
        pieces.push_back({Piece::Text, text, i});
        break;
      }
      const char kind = src[tag + 1];
      const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
      const size_t end = src.find(close, tag + 2);
      if (end == std::string::npos) fail("a tag opened at offset " + std::to_string(tag) + " is not closed");
      std::string inner = src.substr(tag + 2, end - tag - 2);
      const bool strip_before = inner.starts_with("-"), keep_before = inner.starts_with("+");
      if (strip_before || keep_before) inner = inner.substr(1);
      if (inner.ends_with("-")) inner.pop_back(), trim_next = true;
      if (strip_before) {
        text = strip(text, false, true);
      } else if (kind != '{' && !keep_before) {  // lstrip_blocks: blanks before the tag on its line
        const size_t nl = text.find_last_of('\n');
        const std::string tail = text.substr(nl == std::string::npos ? 0 : nl + 1);
        if (tail.find_first_not_of(" \t") == std::string::npos && (nl != std::string::npos || line_start))
          text.erase(text.size() - tail.size());
      }
      pieces.push_back({Piece::Text, text, i});
      if (kind != '#') pieces.push_back({kind == '{' ? Piece::Output : Piece::Block, inner, tag});
      after_block = kind != '{';
      i = end + 2;
    }

    size_t p = 0;
    const auto expr_of = [&](const std::string& s, size_t at) {
      return ExprParser(s, [&](const std::string& what) { fail(what + " at offset " + std::to_string(at)); });
    };
    // Statements until one of `ends` (returned), or the end of the template ("").
    std::function<std::string(std::vector<Stmt>&, const std::vector<std::string>&, ExprPtr*)> block =
        [&](std::vector<Stmt>& out, const std::vector<std::string>& ends, ExprPtr* cond) -> std::string {
      while (p < pieces.size()) {
        const Piece& piece = pieces[p++];
        if (piece.kind == Piece::Text) {
          if (!piece.text.empty()) out.push_back({Stmt::Text, piece.text, "", {}, {}});
          continue;
        }
        ExprParser parser = expr_of(piece.text, piece.at);
        if (piece.kind == Piece::Output) {
          Stmt s{Stmt::Output, "", "", {}, {}};
          s.exprs.push_back(parser.parse_all());
          out.push_back(std::move(s));
          continue;
        }
        const std::string word = parser.ident();
        if (std::find(ends.begin(), ends.end(), word) != ends.end()) {
          if (word == "elif" && cond)
            *cond = parser.parse_all();
          else if (!parser.at_end())
            fail("'" + word + "' takes nothing more, at offset " + std::to_string(piece.at));
          return word;
        }
        if (word == "if") {
          Stmt s{Stmt::If, "", "", {}, {}};
          s.exprs.push_back(parser.parse_all());
          for (;;) {
            s.bodies.emplace_back();
            ExprPtr next;
            const std::string end = block(s.bodies.back(), {"elif", "else", "endif"}, &next);
            if (end == "elif") {
              s.exprs.push_back(std::move(next));
              continue;
            }
            if (end == "else") {
              s.bodies.emplace_back();
              if (block(s.bodies.back(), {"endif"}, nullptr) != "endif") fail("an if has no endif");
            } else if (end != "endif") {
              fail("an if at offset " + std::to_string(piece.at) + " has no endif");
            }
            break;
          }
          out.push_back(std::move(s));
        } else if (word == "for") {
          Stmt s{Stmt::For, parser.ident(), "", {}, {}};
          if (parser.ident() != "in") fail("expected 'in' in the for loop at offset " + std::to_string(piece.at));
          s.exprs.push_back(parser.parse_all());
          s.bodies.emplace_back();
          if (block(s.bodies.back(), {"endfor"}, nullptr) != "endfor")
            fail("a for loop at offset " + std::to_string(piece.at) + " has no endfor");
          out.push_back(std::move(s));
        } else if (word == "set") {
          Stmt s{Stmt::Set, parser.ident(), "", {}, {}};
          if (parser.accept(".")) s.attr = parser.ident();
          parser.expect("=");
          s.exprs.push_back(parser.parse_all());
          out.push_back(std::move(s));
        } else {
          fail("the statement '" + word + "' at offset " + std::to_string(piece.at) + " is not supported");
        }
      }
      return "";
    };
    block(body, {}, nullptr);
  }
};

ChatTemplate::ChatTemplate(const std::string& source, const std::string& where) : impl_(std::make_unique<Impl>()) {
  impl_->where = where;
  impl_->parse(source);
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::json& context) const {
  Impl::Scopes scopes = {context.is_object() ? context : json::object(), json::object()};
  std::string out;
  impl_->run(impl_->body, scopes, out);
  return out;
}

ChatTemplateConfig read_chat_template_config(const std::string& folder) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(folder) / "tokenizer_config.json").string(),
                    jinja = (fs::path(folder) / "chat_template.jinja").string();
  json config = json::object();
  if (fs::exists(path)) {
    std::ifstream in(path);
    config = json::parse(in, nullptr, false);
    TRIAD_CHECK(!config.is_discarded() && config.is_object(), "'" << path << "' is not a JSON object");
  }
  const auto token = [&](const char* key) -> std::string {
    if (!config.contains(key)) return "";
    const json& v = config[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return "";
  };
  ChatTemplateConfig out{"", "", token("bos_token"), token("eos_token")};
  if (fs::exists(jinja)) {
    std::ifstream in(jinja, std::ios::binary);
    out.template_source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    TRIAD_CHECK(in.good() || in.eof(), "cannot read '" << jinja << "'");
    out.where = "'" + jinja + "'";
  } else if (config.contains("chat_template")) {
    const json& t = config["chat_template"];
    TRIAD_CHECK(t.is_string() || t.is_array(), "'" << path << "': chat_template is neither a string nor a list");
    if (t.is_string()) out.template_source = t.get<std::string>();
    for (const json& named : t.is_array() ? t : json::array())
      if (named.is_object() && named.value("name", "") == "default") out.template_source = named.value("template", "");
    out.where = "'" + path + "' chat_template";
  }
  return out;
}

}  // namespace triad::io
