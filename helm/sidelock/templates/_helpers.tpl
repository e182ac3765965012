{{/*
Public templates (stable names; app charts include them) take a "sidelock context": any object with
  .Values        the sidelock values (this chart's .Values, or .Values.sidelock in a parent chart)
  .Release       the release
  .Capabilities  the cluster capabilities
so from a parent chart:  (dict "Values" .Values.sidelock "Release" .Release "Capabilities" .Capabilities)
and from this chart:     .
  sidelock.sidecarContainer   one list item: the sidecar container (for containers: or initContainers:)
  sidelock.containers         the sidecar item if sidecar.mode is classic, else nothing
  sidelock.initContainers     the sidecar item if sidecar.mode is native, else nothing
  sidelock.volumes            list items: the socket emptyDir, the config, the credentials (if mounted)
  sidelock.appVolumeMounts    list items: the socket volume mounted in the app container
  sidelock.appEnv             list items: SIDELOCK_SOCKET and SIDELOCK_ADDR for the app
  sidelock.podAnnotations     map entries: a checksum of the config (rolls pods on config change)
  sidelock.terminationGracePeriodSeconds   a number covering app shutdown + preStop + drain
  sidelock.fullname           "<release>-sidelock": the ConfigMap is named after it
Keep these within what tests/helm/render implements (see README.md, "Testing the chart").
*/}}

{{- define "sidelock.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default "sidelock" .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sidelock.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: sidelock
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "sidelock.demoSelectorLabels" -}}
app.kubernetes.io/name: sidelock-demo
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels the Service / PodMonitor select: monitoring.podSelector, or the demo app's labels. */}}
{{- define "sidelock.podSelector" -}}
{{- if .Values.monitoring.podSelector -}}
{{ toYaml .Values.monitoring.podSelector }}
{{- else -}}
{{ include "sidelock.demoSelectorLabels" . }}
{{- end -}}
{{- end -}}

{{/* The TCP port, from config.listen.tcp ("host:port"). Probes and scraping need it. */}}
{{- define "sidelock.port" -}}
{{- $tcp := .Values.config.listen.tcp -}}
{{- if not $tcp -}}
{{- fail "config.listen.tcp must be set in Kubernetes: the kubelet's probes and Prometheus use it" -}}
{{- end -}}
{{- regexReplaceAll "^.*:" $tcp "" -}}
{{- end -}}

{{- define "sidelock.credentialsDir" -}}/etc/sidelock/redis{{- end -}}

{{/* The config file: values.config with what the chart decides (demo node addresses, password file). */}}
{{- define "sidelock.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $fullname := include "sidelock.fullname" . -}}
{{- if and .Values.demo.enabled .Values.demo.redlock.enabled (eq $cfg.backend.type "redlock") -}}
{{- $nodes := list -}}
{{- range $i := until (int .Values.demo.redlock.replicas) -}}
{{- $nodes = append $nodes (printf "%s-redlock-%d.%s-redlock.%s.svc:6379" $fullname $i $fullname $.Release.Namespace) -}}
{{- end -}}
{{- $_ := set $cfg.backend "nodes" $nodes -}}
{{- else if and .Values.demo.enabled .Values.demo.redis.enabled (eq $cfg.backend.type "redis") -}}
{{- $_ := set $cfg.backend "nodes" (list (printf "%s-redis.%s.svc:6379" $fullname .Release.Namespace)) -}}
{{- end -}}
{{- if and .Values.redis.existingSecret .Values.redis.mountAsFile -}}
{{- $_ := set $cfg.backend "password_file" (printf "%s/%s" (include "sidelock.credentialsDir" .) .Values.redis.passwordKey) -}}
{{- end -}}
{{- if and $cfg.listen.unix (not (hasPrefix (printf "%s/" .Values.sidecar.socketDir) $cfg.listen.unix)) -}}
{{- fail (printf "config.listen.unix (%s) must be inside sidecar.socketDir (%s), the volume shared with the app" $cfg.listen.unix .Values.sidecar.socketDir) -}}
{{- end -}}
{{ toYaml $cfg }}
{{- end -}}

{{- define "sidelock.graceSeconds" -}}
{{- div (add .Values.config.shutdown.grace_ms 999) 1000 -}}
{{- end -}}

{{/* The preStop sleep applies to classic sidecars on clusters with the native sleep action. */}}
{{- define "sidelock.preStopSleep" -}}
{{- if and (eq .Values.sidecar.mode "classic") (gt (int .Values.sidecar.preStopSleepSeconds) 0) (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version) -}}
{{- int .Values.sidecar.preStopSleepSeconds -}}
{{- else -}}
0
{{- end -}}
{{- end -}}

{{- define "sidelock.terminationGracePeriodSeconds" -}}
{{- add (int .Values.sidecar.appShutdownSeconds) (int (include "sidelock.preStopSleep" .)) (int (include "sidelock.graceSeconds" .)) 2 -}}
{{- end -}}

{{- define "sidelock.sidecarContainer" -}}
{{- if and (eq .Values.sidecar.mode "native") (semverCompare "<1.29-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "sidecar.mode native needs Kubernetes >= 1.29 (this cluster: %s); use sidecar.mode classic" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- $port := int (include "sidelock.port" .) -}}
{{- $sleep := int (include "sidelock.preStopSleep" .) -}}
- name: {{ .Values.sidecar.name }}
  image: {{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if eq .Values.sidecar.mode "native" }}
  # Native sidecar: starts before the app's containers, stops after them.
  restartPolicy: Always
  {{- end }}
  args: ["--config", "/etc/sidelock/sidelock.yaml"]
  ports:
    - name: sidelock
      containerPort: {{ $port }}
      protocol: TCP
  {{- if or .Values.redis.existingSecret .Values.sidecar.extraEnv }}
  env:
    {{- if and .Values.redis.existingSecret (not .Values.redis.mountAsFile) }}
    {{- if .Values.redis.usernameKey }}
    - name: {{ .Values.config.backend.username_env }}
      valueFrom:
        secretKeyRef:
          name: {{ .Values.redis.existingSecret }}
          key: {{ .Values.redis.usernameKey }}
    {{- end }}
    - name: {{ .Values.config.backend.password_env }}
      valueFrom:
        secretKeyRef:
          name: {{ .Values.redis.existingSecret }}
          key: {{ .Values.redis.passwordKey }}
    {{- end }}
    {{- with .Values.sidecar.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
  {{- with .Values.sidecar.probes.startup }}
  {{- if .enabled }}
  startupProbe:
    httpGet:
      path: /healthz
      port: sidelock
    periodSeconds: {{ int .periodSeconds }}
    timeoutSeconds: {{ int .timeoutSeconds }}
    failureThreshold: {{ int .failureThreshold }}
  {{- end }}
  {{- end }}
  {{- with .Values.sidecar.probes.liveness }}
  {{- if .enabled }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: sidelock
    periodSeconds: {{ int .periodSeconds }}
    timeoutSeconds: {{ int .timeoutSeconds }}
    failureThreshold: {{ int .failureThreshold }}
  {{- end }}
  {{- end }}
  {{- with .Values.sidecar.probes.readiness }}
  {{- if .enabled }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: sidelock
    periodSeconds: {{ int .periodSeconds }}
    timeoutSeconds: {{ int .timeoutSeconds }}
    failureThreshold: {{ int .failureThreshold }}
  {{- end }}
  {{- end }}
  {{- if gt $sleep 0 }}
  lifecycle:
    preStop:
      sleep:
        seconds: {{ $sleep }}
  {{- end }}
  resources:
    {{- toYaml .Values.sidecar.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.sidecar.securityContext | nindent 4 }}
  volumeMounts:
    - name: sidelock-socket
      mountPath: {{ .Values.sidecar.socketDir }}
    - name: sidelock-config
      mountPath: /etc/sidelock
      readOnly: true
    {{- if and .Values.redis.existingSecret .Values.redis.mountAsFile }}
    - name: sidelock-redis-credentials
      mountPath: {{ include "sidelock.credentialsDir" . }}
      readOnly: true
    {{- end }}
{{- end -}}

{{- define "sidelock.containers" -}}
{{- if eq .Values.sidecar.mode "classic" -}}
{{ include "sidelock.sidecarContainer" . }}
{{- end -}}
{{- end -}}

{{- define "sidelock.initContainers" -}}
{{- if eq .Values.sidecar.mode "native" -}}
{{ include "sidelock.sidecarContainer" . }}
{{- end -}}
{{- end -}}

{{- define "sidelock.volumes" -}}
- name: sidelock-socket
  emptyDir:
    sizeLimit: 1Mi
- name: sidelock-config
  configMap:
    name: {{ include "sidelock.fullname" . }}
{{- if and .Values.redis.existingSecret .Values.redis.mountAsFile }}
- name: sidelock-redis-credentials
  secret:
    secretName: {{ .Values.redis.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{- define "sidelock.appVolumeMounts" -}}
- name: sidelock-socket
  mountPath: {{ .Values.sidecar.socketDir }}
{{- end -}}

{{- define "sidelock.appEnv" -}}
{{- if .Values.config.listen.unix -}}
- name: SIDELOCK_SOCKET
  value: {{ .Values.config.listen.unix | quote }}
{{ end -}}
- name: SIDELOCK_ADDR
  value: {{ printf "127.0.0.1:%s" (include "sidelock.port" .) | quote }}
{{- end -}}

{{- define "sidelock.podAnnotations" -}}
checksum/sidelock-config: {{ include "sidelock.config" . | sha256sum }}
{{- end -}}
