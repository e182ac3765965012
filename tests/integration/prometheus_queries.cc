#include "integration/prometheus_queries.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "common/percent_encoding.h"

namespace sidelock::testing::promql {
namespace {

using nlohmann::json;

void collectPanels(const json& panels, std::vector<Query>& out) {
  if (!panels.is_array()) return;
  for (const auto& panel : panels) {
    const std::string title = panel.value("title", std::string("(untitled)"));
    if (panel.contains("targets") && panel["targets"].is_array()) {
      for (const auto& target : panel["targets"]) {
        if (!target.contains("expr") || !target["expr"].is_string()) continue;
        out.push_back({"panel '" + title + "' target " + target.value("refId", std::string("?")),
                       target["expr"].get<std::string>()});
      }
    }
    // Collapsed rows keep their panels inside the row object.
    if (panel.contains("panels")) collectPanels(panel["panels"], out);
  }
}

bool isIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool isIdentChar(char c) { return isIdentStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Walks a PromQL string and calls `visit(i)` for every index outside strings, `{...}` label
// matchers and `[...]` ranges; visit returns how many characters it consumed (0 = one char).
template <typename Visit>
void scanCode(const std::string& e, Visit visit) {
  size_t i = 0;
  int braces = 0;
  int brackets = 0;
  while (i < e.size()) {
    const char c = e[i];
    if (c == '"' || c == '\'' || c == '`') {
      size_t j = i + 1;
      while (j < e.size() && e[j] != c) j += (e[j] == '\\' && c != '`') ? 2 : 1;
      i = j + 1;
      continue;
    }
    if (c == '{') ++braces;
    if (c == '}') --braces;
    if (c == '[') ++brackets;
    if (c == ']') --brackets;
    if (braces > 0 || brackets > 0 || c == '}' || c == ']') {
      ++i;
      continue;
    }
    const size_t used = visit(i);
    i += used == 0 ? 1 : used;
  }
}

}  // namespace

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Query> dashboardQueries(const std::string& dashboard_json) {
  const json dash = json::parse(dashboard_json);
  std::vector<Query> out;
  if (dash.contains("panels")) collectPanels(dash["panels"], out);
  return out;
}

std::vector<LabelValuesQuery> dashboardVariableQueries(const std::string& dashboard_json) {
  const json dash = json::parse(dashboard_json);
  std::vector<LabelValuesQuery> out;
  if (!dash.contains("templating") || !dash["templating"].contains("list")) return out;
  for (const auto& var : dash["templating"]["list"]) {
    if (var.value("type", std::string()) != "query") continue;
    std::string q;
    if (var.contains("query") && var["query"].is_string()) q = var["query"].get<std::string>();
    if (var.contains("query") && var["query"].is_object()) q = var["query"].value("query", "");
    const std::string prefix = "label_values(";
    if (q.rfind(prefix, 0) != 0 || q.back() != ')') {
      throw std::runtime_error("variable " + var.value("name", std::string("?")) +
                               ": unsupported query '" + q + "'");
    }
    const std::string args = q.substr(prefix.size(), q.size() - prefix.size() - 1);
    const size_t comma = args.rfind(',');
    if (comma == std::string::npos) throw std::runtime_error("label_values without a metric: " + q);
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(" \t"));
      s.erase(s.find_last_not_of(" \t") + 1);
      return s;
    };
    out.push_back({var.value("name", std::string()), trim(args.substr(0, comma)),
                   trim(args.substr(comma + 1))});
  }
  return out;
}

std::vector<Query> ruleQueries(const std::string& rules_yaml) {
  const YAML::Node root = YAML::Load(rules_yaml);
  std::vector<Query> out;
  for (const auto& group : root["groups"]) {
    for (const auto& rule : group["rules"]) {
      std::string origin = rule["alert"] ? "alert " + rule["alert"].as<std::string>()
                                         : "record " + rule["record"].as<std::string>();
      out.push_back({origin, rule["expr"].as<std::string>()});
    }
  }
  return out;
}

std::string substituteVariables(const std::string& expr,
                                const std::map<std::string, std::string>& values) {
  std::vector<std::pair<std::string, std::string>> subs;
  for (const auto& [name, value] : values) {
    subs.emplace_back("${" + name + "}", value);
    subs.emplace_back("$" + name, value);
  }
  std::sort(subs.begin(), subs.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  std::string out;
  size_t i = 0;
  while (i < expr.size()) {
    bool replaced = false;
    if (expr[i] == '$') {
      for (const auto& [from, to] : subs) {
        if (expr.compare(i, from.size(), from) != 0) continue;
        // "$pod" must not match the start of "$pods".
        const size_t end = i + from.size();
        if (from[1] != '{' && end < expr.size() && isIdentChar(expr[end])) continue;
        out += to;
        i = end;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += expr[i++];
  }
  return out;
}

std::string withBoolComparisons(const std::string& expr) {
  std::vector<size_t> insert_at;  // positions right after a comparison operator
  scanCode(expr, [&](size_t i) -> size_t {
    const char c = expr[i];
    const char n = i + 1 < expr.size() ? expr[i + 1] : '\0';
    size_t len = 0;
    if ((c == '=' || c == '!') && n == '=')
      len = 2;
    else if ((c == '>' || c == '<') && n == '=')
      len = 2;
    else if (c == '>' || c == '<')
      len = 1;
    if (len == 0) return 0;
    size_t j = i + len;
    while (j < expr.size() && std::isspace(static_cast<unsigned char>(expr[j]))) ++j;
    const bool has_bool =
        expr.compare(j, 4, "bool") == 0 && (j + 4 == expr.size() || !isIdentChar(expr[j + 4]));
    if (!has_bool) insert_at.push_back(i + len);
    return len;
  });
  std::string out = expr;
  for (auto it = insert_at.rbegin(); it != insert_at.rend(); ++it) out.insert(*it, " bool ");
  return out;
}

std::set<std::string> metricNames(const std::string& expr,
                                  const std::vector<std::string>& prefixes) {
  std::set<std::string> names;
  scanCode(expr, [&](size_t i) -> size_t {
    if (!isIdentStart(expr[i]) || (i > 0 && isIdentChar(expr[i - 1]))) return 0;
    size_t j = i;
    while (j < expr.size() && isIdentChar(expr[j])) ++j;
    const std::string ident = expr.substr(i, j - i);
    for (const auto& p : prefixes) {
      if (ident.rfind(p, 0) == 0) names.insert(ident);
    }
    return j - i;
  });
  return names;
}

std::string urlEncode(const std::string& s) { return percentEncode(s, PercentKeep::kUnreserved); }

}  // namespace sidelock::testing::promql
