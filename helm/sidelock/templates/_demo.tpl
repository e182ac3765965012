{{/* A Redis container for the demo; requires the password from redis.existingSecret when set. */}}
{{- define "sidelock.demoRedisContainer" -}}
- name: redis
  image: {{ .image | quote }}
  args:
    - --save
    - ""
    - --appendonly
    - "no"
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
