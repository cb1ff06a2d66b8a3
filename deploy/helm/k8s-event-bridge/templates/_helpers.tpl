{{/* The chart's name. */}}
{{- define "k8s-event-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name of the release's objects. */}}
{{- define "k8s-event-bridge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "k8s-event-bridge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What selects the bridge's Pods (Deployment, PodDisruptionBudget, Service, anti-affinity,
ServiceMonitor, NetworkPolicy): the name and component the kustomize base uses, and the
release, so that two releases never select each other's Pods. */}}
{{- define "k8s-event-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "k8s-event-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: bridge
{{- end }}

{{/* The labels of every object: the kustomize base's (name, part-of) and Helm's own (chart,
instance, version, managed-by). */}}
{{- define "k8s-event-bridge.labels" -}}
helm.sh/chart: {{ include "k8s-event-bridge.chart" . }}
app.kubernetes.io/name: {{ include "k8s-event-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: k8s-event-bridge
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels of the Pods and of the objects about them (Deployment, PodDisruptionBudget,
Service, ServiceMonitor, NetworkPolicy): every object's, and the component, as in the base. */}}
{{- define "k8s-event-bridge.workloadLabels" -}}
{{ include "k8s-event-bridge.labels" . }}
app.kubernetes.io/component: bridge
{{- end }}

{{- define "k8s-event-bridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "k8s-event-bridge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The HTTP port: config.http.port, else 8080. */}}
{{- define "k8s-event-bridge.httpPort" -}}
{{- dig "http" "port" 8080 .Values.config | int }}
{{- end }}

{{/* The Lease's name: leaderElection.leaseName, else the release's full name. */}}
{{- define "k8s-event-bridge.leaseName" -}}
{{- default (include "k8s-event-bridge.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* The Secret holding the NATS password: nats.existingSecret, else <fullname>-nats. */}}
{{- define "k8s-event-bridge.natsSecretName" -}}
{{- default (printf "%s-nats" (include "k8s-event-bridge.fullname" .)) .Values.nats.existingSecret }}
{{- end }}
