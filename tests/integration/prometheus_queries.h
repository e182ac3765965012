// PromQL found in the shipped observability files (dashboards/*.json, deploy/prometheus/*.yaml),
// pulled out so tests can check every expression: against the metric families sidelock declares
// (promtool_dashboard_test) and against a real Prometheus scraping a live sidecar
// (prometheus_proof_test). Pure string/JSON/YAML work: no sockets, no processes.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace sidelock::testing::promql {

/// One PromQL expression and where it came from (for failure messages).
struct Query {
  std::string origin;  // e.g. "panel 'Waiters' target A" or "alert SidelockNotReady"
  std::string expr;
};

/// A Grafana `label_values(<selector>, <label>)` variable query.
struct LabelValuesQuery {
  std::string variable;
  std::string selector;
  std::string label;
};

/// Reads a whole file; throws std::runtime_error naming the path if it cannot.
std::string readFile(const std::string& path);

/// Every panel target `expr` of a Grafana dashboard JSON (rows' nested panels included). Throws
/// std::runtime_error on invalid JSON.
std::vector<Query> dashboardQueries(const std::string& dashboard_json);

/// The `label_values(...)` queries of the dashboard's query variables.
std::vector<LabelValuesQuery> dashboardVariableQueries(const std::string& dashboard_json);

/// Every rule `expr` (alerting and recording) of a Prometheus rule file. Throws on invalid YAML.
std::vector<Query> ruleQueries(const std::string& rules_yaml);

/// Replaces Grafana variables (`$name` and `${name}` forms) using `values` (keys without '$').
/// Longer names win, so `$__rate_interval` is not mistaken for `$__rate`.
std::string substituteVariables(const std::string& expr,
                                const std::map<std::string, std::string>& values);

/// Turns every filtering comparison (==, !=, >, <, >=, <=) outside label matchers, strings and
/// range brackets into its `bool` form: "x > 5" -> "x > bool 5". The result keeps every series the
/// comparison would test (value 0 or 1), so an alert expression that is legitimately empty while
/// not firing still shows whether its selectors match anything.
std::string withBoolComparisons(const std::string& expr);

/// Metric names an expression refers to: identifiers outside strings and label matchers that
/// start with one of `prefixes` (sidelock's label names never do).
std::set<std::string> metricNames(const std::string& expr,
                                  const std::vector<std::string>& prefixes);

/// Percent-encodes a query-string value.
std::string urlEncode(const std::string& s);

}  // namespace sidelock::testing::promql
