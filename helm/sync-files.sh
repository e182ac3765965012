#!/bin/bash
# Copies the files the chart packages from where they are maintained (Helm's .Files only reads inside the
# chart directory). The test helm_chart fails while a copy is stale; run this, then commit both.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cp "$root/dashboards/sidelock-lock-health.json" "$root/helm/sidelock/files/sidelock-lock-health.json"
cp "$root/deploy/prometheus/sidelock-alerts.yaml" "$root/helm/sidelock/files/sidelock-alerts.yaml"
echo "helm/sidelock/files/ synced; the monitoring-on golden embeds them: UPDATE_GOLDEN=1 tests/helm/run.sh . then review"
