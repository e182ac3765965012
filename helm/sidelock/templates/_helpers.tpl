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
  sidelock.appEnv             list items: SIDELOCK_SOCKET and SIDELOCK_ADDR (the lock API) for the app,
                              DAPR_GRPC_ENDPOINT and SIDELOCK_GRPC_SOCKET (the gRPC API) when set, and
                              SIDELOCK_AUTH_TOKEN when auth.appTokenKey is set
  sidelock.podAnnotations     map entries: a checksum of the config (rolls pods on config change)
  sidelock.electionReadinessProbe   an app container's readinessProbe body: Ready only while the pod
                              leads an election; takes (dict "context" <sidelock context> "election" NAME)
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

{{/* The port of a "host:port" listen address. */}}
{{- define "sidelock.portOf" -}}
{{- regexReplaceAll "^.*:" . "" -}}
{{- end -}}

{{/* "true" if a "host:port" listen address binds loopback only: the kubelet and Prometheus, which connect
to the pod IP, cannot reach it; the pod's own containers can (they share its network namespace). */}}
{{- define "sidelock.isLoopback" -}}
{{- if regexMatch `^(127\.[0-9.]+|localhost|\[::1\]):[0-9]+$` . -}}true{{- end -}}
{{- end -}}

{{/*
The port the probes and Prometheus use (named sidelock-admin in the pod): config.listen.admin, which
serves only /healthz, /readyz and /metrics, so the lock API can stay on localhost. Without listen.admin
it falls back to listen.tcp, which must then listen beyond loopback (and so exposes the lock API: the
chart then refuses the metrics Service). "" when listen.admin is empty and nothing needs the port.
Fails on listen settings the probes or scraping cannot work with.
*/}}
{{- define "sidelock.adminPort" -}}
{{- $l := .Values.config.listen -}}
{{- $p := .Values.sidecar.probes -}}
{{- $m := .Values.monitoring -}}
{{- $users := list -}}
{{- range $k := list "startup" "liveness" "readiness" -}}
{{- if (get $p $k).enabled -}}{{- $users = append $users (printf "sidecar.probes.%s" $k) -}}{{- end -}}
{{- end -}}
{{- if $m.podMonitor.enabled -}}{{- $users = append $users "monitoring.podMonitor" -}}{{- end -}}
{{- if $m.serviceMonitor.enabled -}}{{- $users = append $users "monitoring.serviceMonitor" -}}{{- end -}}
{{- if not (or $l.tcp $l.unix $l.grpc $l.grpc_unix) -}}
{{- fail "config.listen.tcp, unix, grpc and grpc_unix are all empty: the app has no way to reach the lock API" -}}
{{- end -}}
{{- if $l.admin -}}
{{- if and $users (include "sidelock.isLoopback" $l.admin) -}}
{{- fail (printf "config.listen.admin (%s) binds loopback only, but %s connect to the pod IP: use \"0.0.0.0:PORT\"" $l.admin (join ", " $users)) -}}
{{- end -}}
{{- if and $l.tcp (eq (include "sidelock.portOf" $l.admin) (include "sidelock.portOf" $l.tcp)) -}}
{{- fail (printf "config.listen.admin (%s) and config.listen.tcp (%s) must use different ports" $l.admin $l.tcp) -}}
{{- end -}}
{{- include "sidelock.portOf" $l.admin -}}
{{- else if $users -}}
{{- if or (not $l.tcp) (include "sidelock.isLoopback" $l.tcp) -}}
{{- fail (printf "config.listen.admin is empty and config.listen.tcp (%q) is not reachable on the pod IP, but %s need it: set config.listen.admin (chart default \"0.0.0.0:7412\")" $l.tcp (join ", " $users)) -}}
{{- end -}}
{{- if $m.serviceMonitor.enabled -}}
{{- fail "monitoring.serviceMonitor needs config.listen.admin: without it the metrics Service would expose the lock API (config.listen.tcp); set config.listen.admin or use monitoring.podMonitor" -}}
{{- end -}}
{{- include "sidelock.portOf" $l.tcp -}}
{{- end -}}
{{- end -}}

{{/* The lock API's address for the app containers (SIDELOCK_ADDR): listen.tcp, with a wildcard host
replaced by loopback. "" when listen.tcp is empty (the lock API is then on the Unix socket only). */}}
{{- define "sidelock.appAddress" -}}
{{- $tcp := .Values.config.listen.tcp -}}
{{- if $tcp -}}
{{- $host := regexReplaceAll ":[0-9]+$" $tcp "" -}}
{{- $port := include "sidelock.portOf" $tcp -}}
{{- if or (eq $host "") (eq $host "0.0.0.0") -}}
{{- printf "127.0.0.1:%s" $port -}}
{{- else if eq $host "[::]" -}}
{{- printf "[::1]:%s" $port -}}
{{- else -}}
{{- $tcp -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The gRPC API's address for the app containers (DAPR_GRPC_ENDPOINT): listen.grpc, with a wildcard
host replaced by loopback. "" when listen.grpc is empty. */}}
{{- define "sidelock.appGrpcAddress" -}}
{{- $grpc := .Values.config.listen.grpc | default "" -}}
{{- if $grpc -}}
{{- $host := regexReplaceAll ":[0-9]+$" $grpc "" -}}
{{- $port := include "sidelock.portOf" $grpc -}}
{{- if or (eq $host "") (eq $host "0.0.0.0") -}}
{{- printf "127.0.0.1:%s" $port -}}
{{- else if eq $host "[::]" -}}
{{- printf "[::1]:%s" $port -}}
{{- else -}}
{{- $grpc -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sidelock.credentialsDir" -}}/etc/sidelock/redis{{- end -}}
{{- define "sidelock.tlsDir" -}}/etc/sidelock/tls{{- end -}}
{{- define "sidelock.authDir" -}}/etc/sidelock/auth{{- end -}}

{{/* Prometheus's bearer token (auth.prometheusTokenKey), for a PodMonitor / ServiceMonitor endpoint. */}}
{{- define "sidelock.monitorAuthorization" -}}
{{- if and .Values.auth.existingSecret .Values.auth.prometheusTokenKey -}}
authorization:
  type: Bearer
  credentials:
    name: {{ .Values.auth.existingSecret }}
    key: {{ .Values.auth.prometheusTokenKey }}
{{- end -}}
{{- end -}}

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
{{- if and (eq $cfg.backend.type "memory") .Values.demo.enabled (gt (int .Values.demo.replicas) 1) -}}
{{- fail (printf "config.backend.type memory keeps locks inside each sidecar: the %d demo.replicas would each grant the same lock; use one replica, or a Redis backend (redis, sentinel, cluster, redlock)" (int .Values.demo.replicas)) -}}
{{- end -}}
{{- $sentinel := $cfg.backend.sentinel | default dict -}}
{{- if and (eq $cfg.backend.type "sentinel") (not $sentinel.master_name) -}}
{{- fail "config.backend.sentinel.master_name is required for config.backend.type sentinel" -}}
{{- else if and (ne $cfg.backend.type "sentinel") $cfg.backend.sentinel -}}
{{- fail (printf "config.backend.sentinel only applies to config.backend.type sentinel (type is %s)" $cfg.backend.type) -}}
{{- end -}}
{{- if and .Values.redis.existingSecret .Values.redis.mountAsFile -}}
{{- $_ := set $cfg.backend "password_file" (printf "%s/%s" (include "sidelock.credentialsDir" .) .Values.redis.passwordKey) -}}
{{- end -}}
{{- with .Values.redis.tls -}}
{{- if .existingSecret -}}
{{- if ne (empty .certKey) (empty .keyKey) -}}
{{- fail "redis.tls.certKey and redis.tls.keyKey go together (mutual TLS needs both)" -}}
{{- end -}}
{{- $dir := include "sidelock.tlsDir" $ -}}
{{- $_ := set $cfg.backend.tls "enabled" true -}}
{{- $_ := set $cfg.backend.tls "ca_file" (printf "%s/%s" $dir .caKey) -}}
{{- if .certKey -}}
{{- $_ := set $cfg.backend.tls "cert_file" (printf "%s/%s" $dir .certKey) -}}
{{- $_ := set $cfg.backend.tls "key_file" (printf "%s/%s" $dir .keyKey) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with .Values.auth -}}
{{- if .existingSecret -}}
{{- $dir := include "sidelock.authDir" $ -}}
{{- $_ := set $cfg.auth "tokens_file" (printf "%s/%s" $dir .tokensKey) -}}
{{- if .adminTokensKey -}}
{{- if not $cfg.listen.admin -}}
{{- fail "auth.adminTokensKey needs config.listen.admin (the admin listener it protects)" -}}
{{- end -}}
{{- $_ := set $cfg.auth "admin_tokens_file" (printf "%s/%s" $dir .adminTokensKey) -}}
{{- end -}}
{{- else if or .adminTokensKey .appTokenKey .prometheusTokenKey -}}
{{- fail "auth.adminTokensKey, appTokenKey and prometheusTokenKey need auth.existingSecret" -}}
{{- end -}}
{{- end -}}
{{- if and (not $cfg.listen.admin) .Values.monitoring.podMonitor.enabled (not (has "*" $cfg.listen.allowed_hosts)) -}}
{{- fail "without config.listen.admin Prometheus scrapes config.listen.tcp by pod IP, which the lock API refuses as a Host (DNS-rebinding check): set config.listen.admin, or config.listen.allowed_hosts: [\"*\"]" -}}
{{- end -}}
{{- if and $cfg.listen.grpc_unix (not (hasPrefix (printf "%s/" .Values.sidecar.socketDir) $cfg.listen.grpc_unix)) -}}
{{- fail (printf "config.listen.grpc_unix (%s) must be inside sidecar.socketDir (%s), the volume shared with the app" $cfg.listen.grpc_unix .Values.sidecar.socketDir) -}}
{{- end -}}
{{- if and $cfg.listen.unix (not (hasPrefix (printf "%s/" .Values.sidecar.socketDir) $cfg.listen.unix)) -}}
{{- fail (printf "config.listen.unix (%s) must be inside sidecar.socketDir (%s), the volume shared with the app" $cfg.listen.unix .Values.sidecar.socketDir) -}}
{{- end -}}
{{- include "sidelock.electionHealth" (dict "cfg" $cfg "ctx" .) -}}
{{- include "sidelock.checkElections" (dict "cfg" $cfg "ctx" .) -}}
{{ toYaml $cfg }}
{{- end -}}

{{/* config.elections[].health: an entry without one follows sidecar.appReadiness (the app container's
readiness endpoint) when its port is set; `health: false` opts an entry out (the key is dropped).
Takes (dict "cfg" <the config, changed in place> "ctx" <sidelock context>). */}}
{{- define "sidelock.electionHealth" -}}
{{- $app := .ctx.Values.sidecar.appReadiness | default dict -}}
{{- range $e := .cfg.elections | default list -}}
{{- if and (hasKey $e "health") (kindIs "bool" $e.health) -}}
{{- if $e.health -}}
{{- fail (printf "config.elections: %q has health: true; give it {url, ...}, or false to opt out of sidecar.appReadiness" $e.name) -}}
{{- end -}}
{{- $_ := unset $e "health" -}}
{{- else if and (not (hasKey $e "health")) $app.port -}}
{{- $path := $app.path | default "/" -}}
{{- if not (hasPrefix "/" $path) -}}
{{- fail (printf "sidecar.appReadiness.path %q must start with /" $path) -}}
{{- end -}}
{{- $_ := set $e "health" (dict "url" (printf "http://127.0.0.1:%d%s" (int $app.port) $path) "interval_ms" (int $app.intervalMs) "failures" (int $app.failures) "grace_ms" (int $app.graceMs)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Fails on config.identity / config.elections the sidecar would refuse at start-up (a crash loop
after `helm install` succeeded), or that could not work in a pod: a name too long or listed twice, a
ttl_ms above locks.max_ttl_ms, a ${VAR} in a value that the sidecar's environment does not set, an
identity holding a ${VAR} (not expanded there) or shared by several demo replicas.
Takes (dict "cfg" <the config> "ctx" <sidelock context>). */}}
{{- define "sidelock.checkElections" -}}
{{- $cfg := .cfg -}}
{{- $ctx := .ctx -}}
{{- $env := list -}}
{{- range fromYamlArray (include "sidelock.sidecarEnv" $ctx) -}}{{- $env = append $env .name -}}{{- end -}}
{{- $seen := dict -}}
{{- range $i, $e := $cfg.elections | default list -}}
{{- $at := printf "config.elections[%d]" $i -}}
{{- if gt (len $e.name) (int $cfg.locks.max_name_bytes) -}}
{{- fail (printf "%s.name %q is %d bytes long; config.locks.max_name_bytes is %d" $at $e.name (len $e.name) (int $cfg.locks.max_name_bytes)) -}}
{{- end -}}
{{- if hasKey $seen $e.name -}}
{{- fail (printf "%s.name %q is listed twice (also config.elections[%d])" $at $e.name (get $seen $e.name)) -}}
{{- end -}}
{{- $_ := set $seen $e.name $i -}}
{{- if and (hasKey $e "ttl_ms") (not (kindIs "string" $e.ttl_ms)) (not (kindIs "string" $cfg.locks.max_ttl_ms)) -}}
{{- if gt (int64 $e.ttl_ms) (int64 $cfg.locks.max_ttl_ms) -}}
{{- fail (printf "%s.ttl_ms (%d) is above config.locks.max_ttl_ms (%d)" $at (int64 $e.ttl_ms) (int64 $cfg.locks.max_ttl_ms)) -}}
{{- end -}}
{{- end -}}
{{- range $ref := regexFindAll `\$\$|\$\{[^}]*\}?` ($e.value | default "") -1 -}}
{{- if ne $ref "$$" -}}
{{- $var := trimSuffix "}" (trimPrefix "${" $ref) -}}
{{- if not (hasSuffix "}" $ref) -}}
{{- fail (printf "%s.value: \"${\" without its \"}\" (write $$ for a literal $)" $at) -}}
{{- else if not (regexMatch `^[A-Za-z_][A-Za-z0-9_]*$` $var) -}}
{{- fail (printf "%s.value: %q is not an environment variable name (letters, digits and _)" $at $ref) -}}
{{- else if not (has $var $env) -}}
{{- fail (printf "%s.value uses ${%s}, which the sidecar's environment does not set (it has %s; add it with sidecar.extraEnv)" $at $var (join ", " $env)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if contains "${" ($cfg.identity | default "") -}}
{{- fail (printf "config.identity %q: the sidecar does not expand ${VAR} there (only in config.elections[].value); leave it \"\" for $POD_NAME" $cfg.identity) -}}
{{- end -}}
{{- with $ctx.Values.demo -}}
{{- if and $cfg.identity $cfg.elections .enabled (gt (int .replicas) 1) -}}
{{- fail (printf "config.identity %q is the same on all %d demo.replicas (one ConfigMap): every pod would be the leader of config.elections; leave it \"\" (each pod's name)" $cfg.identity (int .replicas)) -}}
{{- end -}}
{{- end -}}
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

{{/* The sidecar container's env items: the pod's name and IP from the downward API (config.identity
defaults to POD_NAME; an election's value may use ${POD_IP}), the Redis and Sentinel credentials from
their Secrets, then sidecar.extraEnv (which may replace POD_NAME or POD_IP). sidelock.config reads the
names back to check the ${VAR}s of config.elections. */}}
{{- define "sidelock.sidecarEnv" -}}
{{- $extra := list -}}
{{- range .Values.sidecar.extraEnv -}}{{- $extra = append $extra .name -}}{{- end -}}
{{- if not (has "POD_NAME" $extra) }}
# Downward API: the pod's name is the sidecar's identity in elections (config.identity "").
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- if not (has "POD_IP" $extra) }}
# Downward API: the pod's IP, for ${POD_IP} in config.elections[].value.
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
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
{{- if and (eq .Values.config.backend.type "sentinel") .Values.redis.sentinel.existingSecret }}
{{- $sentinelCfg := .Values.config.backend.sentinel | default dict }}
{{- with .Values.redis.sentinel }}
{{- if .usernameKey }}
- name: {{ $sentinelCfg.username_env | default "SIDELOCK_SENTINEL_USERNAME" }}
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .usernameKey }}
{{- end }}
- name: {{ $sentinelCfg.password_env | default "SIDELOCK_SENTINEL_PASSWORD" }}
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .passwordKey }}
{{- end }}
{{- end }}
{{- with .Values.sidecar.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "sidelock.sidecarContainer" -}}
{{- if and (eq .Values.sidecar.mode "native") (semverCompare "<1.29-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "sidecar.mode native needs Kubernetes >= 1.29 (this cluster: %s); use sidecar.mode classic" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- $adminPort := include "sidelock.adminPort" . -}}
{{- $tcp := .Values.config.listen.tcp -}}
{{/* The lock API gets a port entry only when it listens beyond loopback on a port of its own. */}}
{{- $lockPort := "" -}}
{{- if and $tcp (not (include "sidelock.isLoopback" $tcp)) (ne (include "sidelock.portOf" $tcp) $adminPort) -}}
{{- $lockPort = include "sidelock.portOf" $tcp -}}
{{- end -}}
{{/* The gRPC API likewise, beyond loopback only. */}}
{{- $grpc := .Values.config.listen.grpc | default "" -}}
{{- $grpcPort := "" -}}
{{- if and $grpc (not (include "sidelock.isLoopback" $grpc)) -}}
{{- $grpcPort = include "sidelock.portOf" $grpc -}}
{{- end -}}
{{- $sleep := int (include "sidelock.preStopSleep" .) -}}
- name: {{ .Values.sidecar.name }}
  image: {{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if eq .Values.sidecar.mode "native" }}
  # Native sidecar: starts before the app's containers, stops after them.
  restartPolicy: Always
  {{- end }}
  args: ["--config", "/etc/sidelock/sidelock.yaml"]
  {{- if or $adminPort $lockPort $grpcPort }}
  ports:
    {{- if $adminPort }}
    {{- if .Values.config.listen.admin }}
    # config.listen.admin: /healthz, /readyz, /metrics for the probes and Prometheus.
    {{- else }}
    # config.listen.tcp (no listen.admin): the lock API, and /healthz, /readyz, /metrics.
    {{- end }}
    - name: sidelock-admin
      containerPort: {{ int $adminPort }}
      protocol: TCP
    {{- end }}
    {{- if $lockPort }}
    # The lock API, listening beyond loopback (config.listen.tcp).
    - name: sidelock
      containerPort: {{ int $lockPort }}
      protocol: TCP
    {{- end }}
    {{- if $grpcPort }}
    # The gRPC API, listening beyond loopback (config.listen.grpc).
    - name: sidelock-grpc
      containerPort: {{ int $grpcPort }}
      protocol: TCP
    {{- end }}
  {{- end }}
  env:
    {{- include "sidelock.sidecarEnv" . | trim | nindent 4 }}
  {{- with .Values.sidecar.probes.startup }}
  {{- if .enabled }}
  startupProbe:
    httpGet:
      path: /healthz
      port: sidelock-admin
      {{- if not $.Values.config.listen.admin }}
      # listen.tcp: the lock API accepts only loopback Host names (DNS-rebinding check).
      httpHeaders:
        - name: Host
          value: localhost
      {{- end }}
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
      port: sidelock-admin
      {{- if not $.Values.config.listen.admin }}
      # listen.tcp: the lock API accepts only loopback Host names (DNS-rebinding check).
      httpHeaders:
        - name: Host
          value: localhost
      {{- end }}
    periodSeconds: {{ int .periodSeconds }}
    timeoutSeconds: {{ int .timeoutSeconds }}
    failureThreshold: {{ int .failureThreshold }}
  {{- end }}
  {{- end }}
  {{- with .Values.sidecar.probes.readiness }}
  {{- if .enabled }}
  readinessProbe:
    httpGet:
      {{- if .requireBackend }}
      # sidecar.probes.readiness.requireBackend: the pod leaves its Services while no lock can be granted.
      path: /readyz
      {{- else }}
      # The process answers: the pod stays in its Services during a backend outage (lock calls get 503).
      path: /healthz
      {{- end }}
      port: sidelock-admin
      {{- if not $.Values.config.listen.admin }}
      # listen.tcp: the lock API accepts only loopback Host names (DNS-rebinding check).
      httpHeaders:
        - name: Host
          value: localhost
      {{- end }}
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
    {{- if .Values.redis.tls.existingSecret }}
    - name: sidelock-redis-tls
      mountPath: {{ include "sidelock.tlsDir" . }}
      readOnly: true
    {{- end }}
    {{- if .Values.auth.existingSecret }}
    - name: sidelock-auth
      mountPath: {{ include "sidelock.authDir" . }}
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
{{- if .Values.redis.tls.existingSecret }}
- name: sidelock-redis-tls
  secret:
    secretName: {{ .Values.redis.tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- if .Values.auth.existingSecret }}
- name: sidelock-auth
  secret:
    secretName: {{ .Values.auth.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{- define "sidelock.appVolumeMounts" -}}
- name: sidelock-socket
  mountPath: {{ .Values.sidecar.socketDir }}
{{- end -}}

{{- define "sidelock.appEnv" -}}
{{- include "sidelock.appEnvItems" . | trim -}}
{{- end -}}

{{- define "sidelock.appEnvItems" -}}
{{- if .Values.config.listen.unix }}
- name: SIDELOCK_SOCKET
  value: {{ .Values.config.listen.unix | quote }}
{{- end }}
{{- with include "sidelock.appAddress" . }}
- name: SIDELOCK_ADDR
  value: {{ . | quote }}
{{- end }}
{{- with include "sidelock.appGrpcAddress" . }}
- name: DAPR_GRPC_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- if .Values.config.listen.grpc_unix }}
- name: SIDELOCK_GRPC_SOCKET
  value: {{ .Values.config.listen.grpc_unix | quote }}
{{- end }}
{{- if and .Values.auth.existingSecret .Values.auth.appTokenKey }}
- name: SIDELOCK_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.auth.existingSecret }}
      key: {{ .Values.auth.appTokenKey }}
{{- end }}
{{- end -}}

{{/*
The readinessProbe body for an APP container that should be Ready only while its pod leads an election,
so that a Service sends traffic to the leader only (README.md, "Leader election"):
  readinessProbe:
    {{- include "sidelock.electionReadinessProbe" (dict "context" $sidelock "election" "scheduler") | nindent 4 }}
GET /v1/elections/NAME/ready on the sidecar's admin listener (the kubelet connects to the pod IP; the
lock API stays on loopback), asked without a candidate: the sidecar answers for its identity (POD_NAME).
The port is a number: a probe's named port is looked up in its own container, and sidelock-admin is the
sidecar's. Optional dict keys: periodSeconds (2), timeoutSeconds (1), failureThreshold (2).
*/}}
{{- define "sidelock.electionReadinessProbe" -}}
{{- $ctx := required "sidelock.electionReadinessProbe: \"context\" (the sidelock context) is required" .context -}}
{{- $name := required "sidelock.electionReadinessProbe: \"election\" (the election's name) is required" .election -}}
{{- if or (not (regexMatch `^[A-Za-z0-9_.:@~-]+$` $name)) (eq $name ".") (eq $name "..") -}}
{{- fail (printf "sidelock.electionReadinessProbe: %q is not an election name (A-Z a-z 0-9 and - _ . : @ ~)" $name) -}}
{{- end -}}
{{- $admin := $ctx.Values.config.listen.admin -}}
{{- if or (not $admin) (include "sidelock.isLoopback" $admin) -}}
{{- fail (printf "sidelock.electionReadinessProbe needs config.listen.admin on the pod IP (it is %q): the kubelet probes the pod IP, and the lock API stays on loopback" $admin) -}}
{{- end -}}
httpGet:
  # 200 while this pod's identity leads the election, 503 otherwise.
  path: /v1/elections/{{ $name }}/ready
  port: {{ int (include "sidelock.portOf" $admin) }}
periodSeconds: {{ int (.periodSeconds | default 2) }}
timeoutSeconds: {{ int (.timeoutSeconds | default 1) }}
successThreshold: 1
failureThreshold: {{ int (.failureThreshold | default 2) }}
{{- end -}}

{{- define "sidelock.podAnnotations" -}}
checksum/sidelock-config: {{ include "sidelock.config" . | sha256sum }}
{{- end -}}
