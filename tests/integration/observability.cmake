# Observability (issue 5): alert rules and dashboard checked by promtool and against a real
# Prometheus scraping a live sidecar. promtool and prometheus come from Debian's `prometheus`
# package; when missing, the tests below fail with "could not find executable" (never skip).
find_program(SIDELOCK_PROMTOOL promtool)
find_program(SIDELOCK_PROMETHEUS prometheus)
if(NOT SIDELOCK_PROMTOOL)
  set(SIDELOCK_PROMTOOL promtool)
endif()
if(NOT SIDELOCK_PROMETHEUS)
  set(SIDELOCK_PROMETHEUS prometheus)
endif()
set(sidelock_prom_dir ${PROJECT_SOURCE_DIR}/deploy/prometheus)

# (a) the rule file parses and its expressions are valid PromQL.
add_test(NAME promtool_check_rules
  COMMAND ${SIDELOCK_PROMTOOL} check rules ${sidelock_prom_dir}/sidelock-alerts.yaml)
# (b) every alert fires and stays quiet where it should (deploy/prometheus/sidelock-alerts.test.yaml).
add_test(NAME promtool_test_rules
  COMMAND ${SIDELOCK_PROMTOOL} test rules ${sidelock_prom_dir}/sidelock-alerts.test.yaml
  WORKING_DIRECTORY ${sidelock_prom_dir})
# The example scrape config (and the rule file it loads).
add_test(NAME promtool_check_config
  COMMAND ${SIDELOCK_PROMTOOL} check config ${sidelock_prom_dir}/prometheus.yml)
set_tests_properties(promtool_check_rules promtool_test_rules promtool_check_config
  PROPERTIES LABELS unit TIMEOUT 60)

# (c) the dashboard JSON is valid, every panel has targets, every metric it or the alerts name is
# declared in src/metrics, and the rendered /metrics text passes `promtool check metrics`.
sidelock_test(promtool_dashboard_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/../unit/promtool_dashboard_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/prometheus_queries.cc
  LIBS sidelock_metrics nlohmann_json::nlohmann_json yaml-cpp
  LABELS unit
  TIMEOUT 60)
target_compile_definitions(promtool_dashboard_test PRIVATE
  SIDELOCK_PROMTOOL="${SIDELOCK_PROMTOOL}")

# (d) the proof: the real sidelock binary on a real redis-server, scraped by a real Prometheus;
# every dashboard and alert expression is evaluated through the Prometheus HTTP API.
# Needs the lead's HTTP client and sidecar process fixtures (tests/support); the support glob is
# CONFIGURE_DEPENDS, so this appears as soon as they exist.
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/prometheus_proof_test.cc
   AND EXISTS ${CMAKE_CURRENT_LIST_DIR}/../support/http_client.cc
   AND EXISTS ${CMAKE_CURRENT_LIST_DIR}/../support/sidecar_process.cc)
  sidelock_test(prometheus_proof_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/prometheus_proof_test.cc
            ${CMAKE_CURRENT_LIST_DIR}/prometheus_queries.cc
    LIBS sidelock_common nlohmann_json::nlohmann_json yaml-cpp
    LABELS integration
    TIMEOUT 180)
  target_compile_definitions(prometheus_proof_test PRIVATE
    SIDELOCK_PROMTOOL="${SIDELOCK_PROMTOOL}" SIDELOCK_PROMETHEUS="${SIDELOCK_PROMETHEUS}")
  add_dependencies(prometheus_proof_test sidelock)
endif()
