{{/*
A Redis container for the demo; requires the password from redis.existingSecret when set.
Every write is persisted (appendonly yes + appendfsync always): the Redlock backend lets such a node
vote as soon as it is up, where a node that may lose writes on a restart is quarantined for
locks.max_ttl_ms (10 minutes by default: a fresh demo would grant nothing that long). The data lives in
an emptyDir, which survives container restarts but not the pod's deletion: production nodes need a
persistent volume.
*/}}
{{- define "sidelock.demoRedisContainer" -}}
- name: redis
  image: {{ .image | quote }}
  args:
    - --save
    - ""
    - --appendonly
    - "yes"
    - --appendfsync
    - always
    {{- if .secret.existingSecret }}
    - --requirepass
    - $(REDIS_PASSWORD)
    {{- else }}
    - --protected-mode
    - "no"
    {{- end }}
  {{- if .secret.existingSecret }}
  env:
    - name: REDIS_PASSWORD
      valueFrom:
        secretKeyRef:
          name: {{ .secret.existingSecret }}
          key: {{ .secret.passwordKey }}
  {{- end }}
  ports:
    - name: redis
      containerPort: 6379
  readinessProbe:
    tcpSocket:
      port: redis
    periodSeconds: 5
  resources:
    requests:
      cpu: 20m
      memory: 32Mi
    limits:
      memory: 128Mi
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: [ALL]
  volumeMounts:
    - name: data
      mountPath: /data
{{- end -}}
