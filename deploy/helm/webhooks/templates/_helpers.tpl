{{/* Names and labels. */}}
{{- define "webhooks.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "webhooks.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "webhooks.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "webhooks.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "webhooks.secret" -}}
{{- required "existingSecret: the name of a Secret with DATABASE_URL, REDIS_URL, WEBHOOKS_ADMIN_PASSWORD, WEBHOOKS_ENCRYPTION_KEYS and the endpoints' secrets" .Values.existingSecret -}}
{{- end -}}

{{/* The endpoints file: in a ConfigMap only when every secret and credential in it is an env: reference. */}}
{{- define "webhooks.configCheck" -}}
{{- $keys := "secrets|secret|api_key|access_token|client_secret|secret_key|password|access_key_id|secret_access_key|basic_auth" -}}
{{- range $line := splitList "\n" .Values.config.toml -}}
{{- if regexMatch (printf "^\\s*(%s)\\s*=" $keys) $line -}}
{{- range $value := regexFindAll "\"[^\"]*\"|'[^']*'" (regexReplaceAll "^[^=]*=" $line "") -1 -}}
{{- if not (regexMatch "^[\"']env:[A-Za-z_][A-Za-z0-9_]*[\"']$" $value) -}}
{{- fail (printf "config.toml: %s holds a literal secret; write it as \"env:NAME\" (a key of existingSecret), or put the file in a Secret (config.existingSecret)" (regexReplaceAll "\\s*=.*$" (trim $line) "")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if regexMatch "://[^/\"'@\\s]*:[^/\"'@\\s]*@" $line -}}
{{- fail "config.toml: a URL with user:password@ is a secret; write the option as \"env:NAME\", or put the file in a Secret (config.existingSecret)" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "webhooks.hasConfig" -}}
{{- if or .Values.config.toml .Values.config.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* The environment every container gets: the Secret's keys, then the chart's own settings. */}}
{{- define "webhooks.env" -}}
envFrom:
  - secretRef:
      name: {{ include "webhooks.secret" . }}
env:
  - name: WEBHOOKS_STOP_TIMEOUT
    value: {{ .Values.stopTimeoutSeconds | quote }}
  - name: WEBHOOKS_LOG_FORMAT
    value: json
  - name: PROMETHEUS_MULTIPROC_DIR
    value: /tmp/metrics
  {{- if include "webhooks.hasConfig" . }}
  - name: WEBHOOKS_CONFIG
    value: /etc/webhooks/webhooks.toml
  {{- end }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{- define "webhooks.volumeMounts" -}}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  {{- if include "webhooks.hasConfig" . }}
  - name: config
    mountPath: /etc/webhooks
    readOnly: true
  {{- end }}
{{- end -}}

{{- define "webhooks.volumes" -}}
volumes:
  - name: tmp
    emptyDir: {}
  {{- if .Values.config.existingSecret }}
  - name: config
    secret:
      secretName: {{ .Values.config.existingSecret }}
      items: [{key: webhooks.toml, path: webhooks.toml}]
  {{- else if .Values.config.toml }}
  - name: config
    configMap:
      name: {{ include "webhooks.fullname" . }}-config
  {{- end }}
{{- end -}}

{{/* What every pod spec shares. */}}
{{- define "webhooks.podCommon" -}}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "webhooks.podAnnotations" -}}
{{- if or .Values.podAnnotations (and .Values.config.toml (not .Values.config.existingSecret)) }}
annotations:
  {{- with .Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- if and .Values.config.toml (not .Values.config.existingSecret) }}
  checksum/config: {{ .Values.config.toml | sha256sum }}
  {{- end }}
{{- end }}
{{- end -}}
