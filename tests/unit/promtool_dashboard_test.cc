// Static checks of the shipped dashboard and alert rules against the metric families sidelock
// declares (src/metrics), plus `promtool check metrics` on the rendered exposition text. The live
// proof against a real Prometheus is tests/integration/prometheus_proof_test.cc.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "integration/prometheus_queries.h"
#include "metrics/metrics.h"

namespace sidelock::testing::promql {
namespace {

using nlohmann::json;

const std::string kDashboard =
    std::string(SIDELOCK_SOURCE_DIR) + "/dashboards/sidelock-lock-health.json";
const std::string kAlerts =
    std::string(SIDELOCK_SOURCE_DIR) + "/deploy/prometheus/sidelock-alerts.yaml";
const std::vector<std::string> kPrefixes = {"sidelock_", "process_"};

// A Metrics registry with every lazily created series present (per node, per route), rendered.
std::string renderAllFamilies() {
  metrics::Metrics m("0.0.0-test");
  m.node("127.0.0.1:6379").up->Set(1);
  m.httpRequests("/v1/locks/{name}/acquire", 200).Increment();
  m.httpLatency("/v1/locks/{name}/acquire").Observe(0.001);
  m.electionSeries("scheduler").leader.Set(1);  // a configured election's gauges
  m.lock_events_sent_total.Add({{"type", "acquired"}}).Increment();  // labelled on first use
  return m.render();
}

// Series names a PromQL query may use for the rendered families (histograms: _bucket/_sum/_count).
std::set<std::string> exportedSeriesNames(const std::string& text,
                                          std::set<std::string>* families) {
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string hash, kw, name, type;
    ls >> hash >> kw >> name >> type;
    if (hash != "#" || kw != "TYPE") continue;
    if (families != nullptr) families->insert(name);
    if (type == "histogram" || type == "summary") {
      names.insert(name + "_count");
      names.insert(name + "_sum");
      if (type == "histogram") names.insert(name + "_bucket");
    } else {
      names.insert(name);
    }
  }
  return names;
}

std::map<std::string, std::string> grafanaVariables() {
  return {{"__rate_interval", "1m"}, {"__interval", "15s"},
          {"__range", "1h"},         {"datasource", "prometheus"},
          {"namespace", ".*"},       {"pod", ".*"},
          {"instance", ".*"}};
}

TEST(DashboardTest, IsValidGrafanaJsonWithDatasourceAndFilterVariables) {
  const json dash = json::parse(readFile(kDashboard));
  EXPECT_EQ(dash.value("title", ""), "sidelock — lock health");
  EXPECT_FALSE(dash.value("uid", "").empty());
  std::map<std::string, json> vars;
  for (const auto& v : dash["templating"]["list"]) vars[v.value("name", "")] = v;
  ASSERT_TRUE(vars.count("datasource"));
  EXPECT_EQ(vars["datasource"].value("type", ""), "datasource");
  EXPECT_EQ(vars["datasource"].value("query", ""), "prometheus");
  for (const char* name : {"namespace", "pod", "instance"}) {
    ASSERT_TRUE(vars.count(name)) << name;
    EXPECT_EQ(vars[name].value("type", ""), "query") << name;
    EXPECT_EQ(vars[name]["datasource"].value("uid", ""), "${datasource}") << name;
  }
  const auto var_queries = dashboardVariableQueries(readFile(kDashboard));
  ASSERT_EQ(var_queries.size(), 3u);
  for (const auto& q : var_queries) {
    EXPECT_EQ(q.variable, q.label);
    EXPECT_EQ(q.selector.rfind("sidelock_build_info", 0), 0u) << q.selector;
  }
}

TEST(DashboardTest, EveryPanelHasPrometheusTargetsOnTheDatasourceVariable) {
  const json dash = json::parse(readFile(kDashboard));
  std::set<int> ids;
  int panels = 0;
  int rows = 0;
  for (const auto& p : dash["panels"]) {
    ASSERT_TRUE(p.contains("id"));
    EXPECT_TRUE(ids.insert(p["id"].get<int>()).second) << "duplicate panel id " << p["id"];
    ASSERT_TRUE(p.contains("gridPos")) << p.value("title", "");
    if (p.value("type", "") == "row") {
      ++rows;
      EXPECT_TRUE(p.value("panels", json::array()).empty()) << "rows are expanded";
      continue;
    }
    ++panels;
    const std::string title = p.value("title", "");
    EXPECT_FALSE(title.empty());
    EXPECT_FALSE(p.value("description", "").empty()) << title;
    EXPECT_EQ(p["datasource"].value("uid", ""), "${datasource}") << title;
    ASSERT_TRUE(p.contains("targets") && p["targets"].is_array()) << title;
    ASSERT_FALSE(p["targets"].empty()) << title;
    for (const auto& t : p["targets"]) {
      EXPECT_FALSE(t.value("expr", "").empty()) << title;
      EXPECT_EQ(t["datasource"].value("uid", ""), "${datasource}") << title;
      // Every panel honours the namespace/pod/instance filters.
      const std::string expr = t.value("expr", "");
      EXPECT_NE(expr.find("pod=~\"$pod\""), std::string::npos) << title << ": " << expr;
      EXPECT_NE(expr.find("instance=~\"$instance\""), std::string::npos) << title << ": " << expr;
    }
  }
  EXPECT_GE(rows, 5);
  EXPECT_GE(panels, 25);
}

// The first row answers "is it healthy?" at a glance: sidecars ready, backend connections up, the
// 5xx ratio and the oldest lease (a stuck lock).
TEST(DashboardTest, StatusRowComesFirst) {
  const json dash = json::parse(readFile(kDashboard));
  ASSERT_FALSE(dash["panels"].empty());
  const json& first = dash["panels"][0];
  EXPECT_EQ(first.value("type", ""), "row");
  EXPECT_EQ(first.value("title", ""), "Status");
  std::string exprs;
  for (size_t i = 1; i < dash["panels"].size() && dash["panels"][i].value("type", "") != "row";
       ++i) {
    const json& p = dash["panels"][i];
    EXPECT_EQ(p["gridPos"].value("y", -1), 1) << p.value("title", "") << " is not in the top row";
    for (const auto& t : p["targets"]) exprs += t.value("expr", "") + "\n";
  }
  for (const char* needle : {"sidelock_backend_ready", "sidelock_backend_up", "code=~\"5..\"",
                             "sidelock_oldest_lease_age_seconds"}) {
    EXPECT_NE(exprs.find(needle), std::string::npos) << "status row lacks " << needle << ":\n"
                                                     << exprs;
  }
}

// A panel whose title names percentiles (p50, p99) plots exactly those quantiles.
TEST(DashboardTest, PercentilesInTitlesMatchTheQuantilesPlotted) {
  const json dash = json::parse(readFile(kDashboard));
  const std::regex title_pct("\\bp([0-9]+)\\b");
  const std::regex quantile("histogram_quantile\\(\\s*([0-9.]+)");
  int checked = 0;
  for (const auto& p : dash["panels"]) {
    const std::string title = p.value("title", "");
    std::set<double> named, plotted;
    for (std::sregex_iterator it(title.begin(), title.end(), title_pct), end; it != end; ++it) {
      named.insert(std::stod((*it)[1].str()) / 100);
    }
    if (named.empty()) continue;
    for (const auto& t : p["targets"]) {
      const std::string expr = t.value("expr", "");
      for (std::sregex_iterator it(expr.begin(), expr.end(), quantile), end; it != end; ++it) {
        plotted.insert(std::stod((*it)[1].str()));
      }
    }
    EXPECT_EQ(named, plotted) << title;
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

// README.md ("Dashboard") lists the rows in the dashboard's order, by their titles.
TEST(DashboardTest, ReadmeListsEveryRowInOrder) {
  const json dash = json::parse(readFile(kDashboard));
  std::vector<std::string> rows;
  for (const auto& p : dash["panels"]) {
    if (p.value("type", "") == "row") rows.push_back(p.value("title", ""));
  }
  const std::string readme = readFile(std::string(SIDELOCK_SOURCE_DIR) + "/README.md");
  const size_t start = readme.find("\n## Dashboard\n");
  ASSERT_NE(start, std::string::npos);
  const size_t stop = readme.find("\n## ", start + 1);
  const std::string section = readme.substr(start, stop - start);
  std::vector<std::string> listed;
  const std::regex item("\n[0-9]+\\. \\*\\*([^*]+)\\*\\*");
  for (std::sregex_iterator it(section.begin(), section.end(), item), end; it != end; ++it) {
    listed.push_back((*it)[1].str());
  }
  EXPECT_EQ(listed, rows);
}

TEST(DashboardTest, VariablesAreAllKnown) {
  for (const auto& q : dashboardQueries(readFile(kDashboard))) {
    const std::string expr = substituteVariables(q.expr, grafanaVariables());
    EXPECT_EQ(expr.find('$'), std::string::npos) << q.origin << ": " << expr;
  }
}

TEST(DashboardTest, EveryQueriedMetricIsDeclaredAndEveryFamilyIsShown) {
  std::set<std::string> families;
  const std::set<std::string> exported = exportedSeriesNames(renderAllFamilies(), &families);
  ASSERT_TRUE(exported.count("sidelock_acquire_wait_seconds_bucket"));

  std::set<std::string> used;
  auto check = [&](const std::vector<Query>& queries) {
    for (const auto& q : queries) {
      const auto names = metricNames(q.expr, kPrefixes);
      EXPECT_FALSE(names.empty()) << q.origin << " queries no sidelock metric: " << q.expr;
      for (const auto& n : names) {
        EXPECT_TRUE(exported.count(n)) << q.origin << " queries undeclared metric " << n;
        used.insert(n);
      }
    }
  };
  check(dashboardQueries(readFile(kDashboard)));
  std::set<std::string> dashboard_used = used;
  check(ruleQueries(readFile(kAlerts)));

  // The dashboard shows every family sidelock exports (issue 5), except these on purpose.
  const std::set<std::string> not_shown = {"process_virtual_memory_bytes"};
  for (const auto& f : families) {
    if (not_shown.count(f)) continue;
    bool shown = dashboard_used.count(f) || dashboard_used.count(f + "_bucket") ||
                 dashboard_used.count(f + "_count");
    EXPECT_TRUE(shown) << "metric family " << f << " has no dashboard panel";
  }
}

TEST(DashboardTest, UndeclaredMetricIsDetected) {
  std::set<std::string> families;
  const std::set<std::string> exported = exportedSeriesNames(renderAllFamilies(), &families);
  const auto names = metricNames(
      "sum by (result) (rate(sidelock_acquires_total{pod=~\"$pod\"}[$__rate_interval]))",
      kPrefixes);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_FALSE(exported.count(*names.begin()));
}

TEST(AlertRulesTest, RequiredAlertsArePresentWithRunbooks) {
  const auto rules = ruleQueries(readFile(kAlerts));
  std::set<std::string> alerts;
  for (const auto& r : rules) alerts.insert(r.origin);
  for (const char* a : {"SidelockBackendNodeDown", "SidelockRedlockQuorumLost",
                        "SidelockLeasesExpiringBeforeRelease", "SidelockFailedReleasesRising",
                        "SidelockWaitP99High", "SidelockWaiterQueueSaturated", "SidelockNotReady",
                        "SidelockLeasesLost", "SidelockTargetDown", "SidelockHttp5xxRatioHigh"}) {
    EXPECT_TRUE(alerts.count(std::string("alert ") + a)) << a;
  }
  // Each runbook_url anchor exists in RUNBOOK.md (GitHub anchors: lower-cased heading).
  const std::string runbook =
      readFile(std::string(SIDELOCK_SOURCE_DIR) + "/deploy/prometheus/RUNBOOK.md");
  const std::string yaml = readFile(kAlerts);
  size_t pos = 0;
  int urls = 0;
  while ((pos = yaml.find("RUNBOOK.md#", pos)) != std::string::npos) {
    // Absolute, so that Alertmanager and Grafana render a link that works.
    const size_t url_start = yaml.rfind('"', pos) + 1;
    EXPECT_EQ(yaml.compare(url_start, 8, "https://"), 0)
        << "runbook_url is not absolute: " << yaml.substr(url_start, pos + 11 - url_start);
    pos += 11;
    const std::string anchor = yaml.substr(pos, yaml.find('"', pos) - pos);
    bool found = false;
    std::istringstream in(runbook);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("## ", 0) != 0) continue;
      std::string h = line.substr(3);
      for (auto& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (h == anchor) found = true;
    }
    EXPECT_TRUE(found) << "RUNBOOK.md has no section for #" << anchor;
    ++urls;
  }
  EXPECT_EQ(urls, static_cast<int>(rules.size()));
}

TEST(PromqlRewriteTest, ComparisonsBecomeBoolOutsideMatchersAndStrings) {
  EXPECT_EQ(withBoolComparisons("sidelock_backend_ready == 0"),
            "sidelock_backend_ready == bool  0");
  EXPECT_EQ(withBoolComparisons("a{x!=\"1\",y=~\"a|b\"}>5"), "a{x!=\"1\",y=~\"a|b\"}> bool 5");
  EXPECT_EQ(withBoolComparisons("a >= bool 1"), "a >= bool 1");
  EXPECT_EQ(withBoolComparisons("rate(a{l=\"<>\"}[5m]) / b < 0.1"),
            "rate(a{l=\"<>\"}[5m]) / b < bool  0.1");
  EXPECT_EQ(withBoolComparisons("sum(rate(x[1m]))"), "sum(rate(x[1m]))");
}

TEST(PromqlRewriteTest, SubstitutesGrafanaVariables) {
  const std::map<std::string, std::string> vars = {
      {"__rate_interval", "1m"}, {"__rate", "X"}, {"pod", "p-0"}, {"datasource", "ds"}};
  EXPECT_EQ(substituteVariables("rate(a{pod=~\"$pod\"}[$__rate_interval])", vars),
            "rate(a{pod=~\"p-0\"}[1m])");
  EXPECT_EQ(substituteVariables("${datasource} $pods", vars), "ds $pods");
}

TEST(PromqlRewriteTest, MetricNamesIgnoreLabelsAndFunctions) {
  const auto names = metricNames(
      "histogram_quantile(0.99, sum by (node, le) (rate(sidelock_backend_request_seconds_bucket"
      "{node=\"sidelock_x\"}[1m]))) / process_open_fds",
      kPrefixes);
  EXPECT_EQ(names,
            (std::set<std::string>{"sidelock_backend_request_seconds_bucket", "process_open_fds"}));
}

TEST(MetricsLintTest, RenderedMetricsPassPromtoolCheckMetrics) {
  const std::string text = renderAllFamilies();
  char path[] = "/tmp/sidelock-metrics-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const std::string cmd = std::string(SIDELOCK_PROMTOOL) + " check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  const int status = pclose(p);
  unlink(path);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << out;
  EXPECT_EQ(out, "") << out;
}

}  // namespace
}  // namespace sidelock::testing::promql
