{{- define "superpod.name" -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}

{{- define "superpod.labels" -}}
app.kubernetes.io/name: superpod-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "superpod.selector" -}}
app.kubernetes.io/name: superpod-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
