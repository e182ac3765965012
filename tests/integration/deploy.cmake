# Deployment artefacts (issue 6): the Helm chart rendered by tests/helm/render (Go text/template + sprig
# from Debian, built offline in a temp GOPATH/GOCACHE), golden outputs, schema validation, and checks of
# deploy/ (compose, Dockerfile runtime packages, systemd unit). Uses the sidelock binary, when built, for
# `--check-config` on every rendered config.
# Checks of the chart and docs only: against the shipped binary only (label "shipped",
# tests/run.sh); no sanitizer finds anything in a template.
find_program(SIDELOCK_GO go)
if(SIDELOCK_GO)
  add_test(NAME helm_chart
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/helm/run.sh ${PROJECT_SOURCE_DIR} $<TARGET_FILE:sidelock>)
  set_tests_properties(helm_chart PROPERTIES TIMEOUT 300 LABELS "integration;shipped")
else()
  message(WARNING "go not found (Debian: golang-go): the helm_chart test is not registered")
endif()

# Kubernetes API schemas (issue 19): every rendered manifest of every value set (the goldens) and
# deploy/kubernetes/, validated strictly by tests/helm/kube-schema/validate.mjs with the npm packages
# pinned there (tests/run.sh installs them before ctest; run.sh installs them itself when missing).
find_program(SIDELOCK_NODE node)
if(SIDELOCK_NODE)
  # No binary: it runs once, in the first pass.
  add_test(NAME helm_kube_schema
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/helm/kube-schema/run.sh ${PROJECT_SOURCE_DIR})
  set_tests_properties(helm_kube_schema PROPERTIES TIMEOUT 300 LABELS "integration")
else()
  message(WARNING "node not found (Debian: nodejs): the helm_kube_schema test is not registered")
endif()
