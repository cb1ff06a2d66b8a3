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

{{/* The API server's token, its CA and the namespace, where the in-cluster config reads them:
what Kubernetes mounts by itself (kube-api-access-<random>), but with a token of
serviceAccount.tokenExpirationSeconds (600: the API server's minimum) instead of 3607 s, which
the API server extends to a year. The kubelet writes a new token at 80 % of its life; the bridge
and the remediation worker read the file again at most a minute after it changed. The Pods set
automountServiceAccountToken: false and mount this volume (apiAccessMount) instead. */}}
{{- define "k8s-event-bridge.apiAccessVolume" -}}
- name: kube-api-access
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: {{ .Values.serviceAccount.tokenExpirationSeconds | int }}
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                apiVersion: v1
                fieldPath: metadata.namespace
{{- end }}

{{- define "k8s-event-bridge.apiAccessMount" -}}
- name: kube-api-access
  mountPath: /var/run/secrets/kubernetes.io/serviceaccount
  readOnly: true
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

{{/* ------------------------------------------------------------------ enrichment

What config.enrich reads needs rights of its own (bridge/access.py computes the same rules
from a config; tests/unit/test_access.py holds the chart to it). */}}

{{/* The kinds config.enrich.object.kinds may name: kind -> its API group and resource, as
KINDS in common/k8s_event_common/owners.py. */}}
{{- define "k8s-event-bridge.lookupKinds" -}}
Pod: {group: "", resource: pods}
Node: {group: "", resource: nodes}
Service: {group: "", resource: services}
ReplicationController: {group: "", resource: replicationcontrollers}
PersistentVolumeClaim: {group: "", resource: persistentvolumeclaims}
ReplicaSet: {group: apps, resource: replicasets}
Deployment: {group: apps, resource: deployments}
StatefulSet: {group: apps, resource: statefulsets}
DaemonSet: {group: apps, resource: daemonsets}
Job: {group: batch, resource: jobs}
CronJob: {group: batch, resource: cronjobs}
{{- end }}

{{/* The ClusterRole rules config.enrich needs, as YAML {rules: [...]}: list and watch on
namespaces with any enrich.namespace label or annotation; with enrich.object.labels,
owner_kind or owner_name, get on the resources of enrich.object.kinds (the bridge's default
kinds when unset), one rule per API group (core first), resources sorted. Nothing
configured: no rule. */}}
{{- define "k8s-event-bridge.enrichRules" -}}
{{- $enrich := .Values.config.enrich | default dict }}
{{- $namespace := $enrich.namespace | default dict }}
{{- $object := $enrich.object | default dict }}
{{- $rules := list }}
{{- if or $namespace.labels $namespace.annotations }}
{{- $rules = append $rules (dict "apiGroups" (list "") "resources" (list "namespaces") "verbs" (list "list" "watch")) }}
{{- end }}
{{- if or $object.labels $object.owner_kind $object.owner_name }}
{{- $kinds := list "Pod" "ReplicaSet" "Deployment" "StatefulSet" "DaemonSet" "Job" "CronJob" }}
{{- if hasKey $object "kinds" }}{{ $kinds = $object.kinds }}{{ end }}
{{- $table := fromYaml (include "k8s-event-bridge.lookupKinds" .) }}
{{- $groups := dict }}
{{- range $kinds }}
{{- if not (hasKey $table .) }}
{{- fail (printf "config.enrich.object.kinds: %s is not a kind the bridge can read" .) }}
{{- end }}
{{- $kind := get $table . }}
{{- $_ := set $groups $kind.group (append (get $groups $kind.group | default list) $kind.resource | uniq) }}
{{- end }}
{{- range $group := keys $groups | sortAlpha }}
{{- $rules = append $rules (dict "apiGroups" (list $group) "resources" (get $groups $group | sortAlpha) "verbs" (list "get")) }}
{{- end }}
{{- end }}
{{- toYaml (dict "rules" $rules) }}
{{- end }}

{{/* ------------------------------------------------------------------ secrets, as Secrets

Each program (the bridge: .Values.nats; the subscribers: .Values.alerting.nats,
.Values.remediation.nats, .Values.otlp.nats, .Values.digests.nats, .Values.alerting.alertmanager,
.Values.otlp.otlp)
takes its secrets only from Secrets: a password, token or the OTLP endpoint's headers as an
environment variable from a secretKeyRef, a .creds file, an NKey seed, a bearer token file and
TLS files as a Secret volume, read-only, mode 0440 (group readable: the kubelet gives the files
the Pod's fsGroup), and the chart writes the files' paths into the program's config itself.
values.schema.json refuses the plain values. */}}

{{/* Where a program's secret files are mounted: <secretsDir>/<what>/<file>. */}}
{{- define "k8s-event-bridge.secretsDir" -}}
/var/run/secrets/k8s-event-bridge
{{- end }}

{{/* The files of one "service" (nats, alertmanager, otlp) from its values: a list of
{volume, secret, items: [{key, path}], dir} as YAML, items named by the file the config
points at. Arguments: (dict "v" <values> "service" "nats" "where" "nats" (the values'
path, for errors)). */}}
{{- define "k8s-event-bridge.secretFiles" -}}
{{- $v := .v }}
{{- $dir := printf "%s/%s" (include "k8s-event-bridge.secretsDir" .) .service }}
{{- $out := list }}
{{- with $v.credentialsSecret }}{{ if .name }}
{{- $out = append $out (dict "volume" (printf "%s-creds" $.service) "secret" .name "dir" (printf "%s/creds" $dir) "items" (list (dict "key" (.key | default "user.creds") "path" "user.creds"))) }}
{{- end }}{{ end }}
{{- with $v.nkeySecret }}{{ if .name }}
{{- $out = append $out (dict "volume" (printf "%s-nkey" $.service) "secret" .name "dir" (printf "%s/nkey" $dir) "items" (list (dict "key" (.key | default "user.nk") "path" "user.nk"))) }}
{{- end }}{{ end }}
{{- with $v.bearerTokenSecret }}{{ if .name }}
{{- $out = append $out (dict "volume" (printf "%s-token" $.service) "secret" .name "dir" (printf "%s/token" $dir) "items" (list (dict "key" (.key | default "token") "path" "token"))) }}
{{- end }}{{ end }}
{{- with $v.tlsSecret }}{{ if .name }}
{{- $items := list }}
{{- if .caKey }}{{ $items = append $items (dict "key" .caKey "path" "ca.crt") }}{{ end }}
{{- if and .certKey .keyKey }}
{{- $items = append $items (dict "key" .certKey "path" "tls.crt") }}
{{- $items = append $items (dict "key" .keyKey "path" "tls.key") }}
{{- else if or .certKey .keyKey }}
{{- fail (printf "%s.tlsSecret: certKey and keyKey go together (mutual TLS), or neither" $.where) }}
{{- end }}
{{- if not $items }}
{{- fail (printf "%s.tlsSecret.name is set but no key is: set caKey, or certKey and keyKey, or both" $.where) }}
{{- end }}
{{- $out = append $out (dict "volume" (printf "%s-tls" $.service) "secret" .name "dir" (printf "%s/tls" $dir) "items" $items) }}
{{- end }}{{ end }}
{{- if and $v.credentialsSecret $v.nkeySecret }}
{{- if and $v.credentialsSecret.name $v.nkeySecret.name }}
{{- fail (printf "%s.credentialsSecret and %s.nkeySecret are both set: a .creds file holds the NKey seed already; set one" .where .where) }}
{{- end }}
{{- end }}
{{- toYaml (dict "files" $out) }}
{{- end }}

{{/* The config keys pointing at those files, as YAML to merge into the program's section
(nats: creds_file, nkey_seed_file, tls.*; alertmanager: bearer_token_file, tls.*; otlp: tls.*).
Arguments as secretFiles. */}}
{{- define "k8s-event-bridge.secretFileConfig" -}}
{{- $out := dict }}
{{- $tls := dict }}
{{- $files := (fromYaml (include "k8s-event-bridge.secretFiles" .)).files }}
{{- range $files }}
{{- $dir := .dir }}
{{- range .items }}
{{- $path := printf "%s/%s" $dir .path }}
{{- if eq .path "user.creds" }}{{ $_ := set $out "creds_file" $path }}{{ end }}
{{- if eq .path "user.nk" }}{{ $_ := set $out "nkey_seed_file" $path }}{{ end }}
{{- if eq .path "token" }}{{ $_ := set $out "bearer_token_file" $path }}{{ end }}
{{- if eq .path "ca.crt" }}{{ $_ := set $tls "ca_file" $path }}{{ end }}
{{- if eq .path "tls.crt" }}{{ $_ := set $tls "cert_file" $path }}{{ end }}
{{- if eq .path "tls.key" }}{{ $_ := set $tls "key_file" $path }}{{ end }}
{{- end }}
{{- end }}
{{- if $tls }}{{ $_ := set $out "tls" $tls }}{{ end }}
{{- toYaml $out }}
{{- end }}

{{/* The volumes of a program's secret files (a list of Pod volumes). Arguments: (list
(dict "v" ... "service" ... "where" ...) ...). */}}
{{- define "k8s-event-bridge.secretVolumes" -}}
{{- range . }}
{{- range (fromYaml (include "k8s-event-bridge.secretFiles" .)).files }}
- name: {{ .volume }}
  secret:
    secretName: {{ .secret }}
    # read-only, root:<fsGroup> 0440: the program's user reads them through the Pod's fsGroup
    defaultMode: 288
    items:
      {{- toYaml .items | nindent 6 }}
{{- end }}
{{- end }}
{{- end }}

{{/* The volumeMounts of a program's secret files; arguments as secretVolumes. Not subPath:
a file replaced in the Secret (a rotated .creds) appears in the Pod. */}}
{{- define "k8s-event-bridge.secretVolumeMounts" -}}
{{- range . }}
{{- range (fromYaml (include "k8s-event-bridge.secretFiles" .)).files }}
- name: {{ .volume }}
  mountPath: {{ .dir }}
  readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{/* The environment variables of a password and a token from Secrets. Arguments: (dict
"v" <values: existingSecret, existingSecretKey, tokenSecret> "env" "BRIDGE_NATS__"
"secret" <the default Secret's name> "passwordKey" <its default key>). A password from the
default Secret is optional (the Pod starts without it, as deploy/'s do); a Secret named in
the values must exist. */}}
{{- define "k8s-event-bridge.secretEnv" -}}
- name: {{ .env }}PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .v.existingSecret | default .secret }}
      key: {{ .v.existingSecretKey | default .passwordKey }}
      {{- if not .v.existingSecret }}
      optional: true
      {{- end }}
{{- with .v.tokenSecret }}{{ if .name }}
- name: {{ $.env }}TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .key | default "token" }}
{{- end }}{{ end }}
{{- end }}

{{/* Fails unless the Pod's fsGroup lets a non-root user read the mounted secret files.
Arguments: (dict "files" <secretVolumes output> "ctx" $). */}}
{{- define "k8s-event-bridge.requireFsGroup" -}}
{{- if and (trim .files) (not (dig "fsGroup" nil (.ctx.Values.podSecurityContext | default dict))) }}
{{- fail "podSecurityContext.fsGroup is needed with a Secret mounted as files (credentialsSecret, nkeySecret, tlsSecret, bearerTokenSecret): they are mounted 0440, root and the fsGroup" }}
{{- end }}
{{- end }}

{{/* ------------------------------------------------------------------ the subscribers

The alerting subscriber, the remediation worker, the OTLP subscriber and the digests' program
(alerting.enabled, remediation.enabled, otlp.enabled, digests.enabled), as deploy/consumers/
makes them: the same image, their own names, labels and ServiceAccount. Called with (dict "ctx"
$ "sub" "alerting") (or "remediation", "otlp", "digests"). */}}

{{/* <fullname>-alerting, <fullname>-remediation, <fullname>-otlp, <fullname>-digests */}}
{{- define "k8s-event-bridge.subscriber.fullname" -}}
{{- printf "%s-%s" (include "k8s-event-bridge.fullname" .ctx) .sub | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What selects a subscriber's Pods: its program's name (k8s-event-alerting, as in
deploy/consumers/), the release, its component; never the bridge's Pods (component bridge). */}}
{{- define "k8s-event-bridge.subscriber.selectorLabels" -}}
app.kubernetes.io/name: k8s-event-{{ .sub }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .sub }}
{{- end }}

{{- define "k8s-event-bridge.subscriber.labels" -}}
helm.sh/chart: {{ include "k8s-event-bridge.chart" .ctx }}
{{ include "k8s-event-bridge.subscriber.selectorLabels" . }}
app.kubernetes.io/part-of: k8s-event-bridge
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end }}

{{/* A subscriber's config (its `config` values) with what the chart writes itself: the
NATS servers, stream, digests' stream and prefix, and subject prefix of the bridge's config
when it names none (the digests' program gets no subjects: it reads the whole stream), the paths
of the files mounted from Secrets; for the remediation worker its cluster (the bridge's
config.cluster.name) and the namespaces it may act in (remediation.namespaces); for the
alerting subscriber one generatorURL for its replicas. As YAML. */}}
{{- define "k8s-event-bridge.subscriber.config" -}}
{{- $v := get .ctx.Values .sub }}
{{- $config := deepCopy ($v.config | default dict) }}
{{- $bridge := .ctx.Values.config | default dict }}
{{- $bridgeNats := $bridge.nats | default dict }}
{{- $nats := $config.nats | default dict }}
{{- if not (hasKey $nats "servers") }}
{{- $_ := set $nats "servers" ($bridgeNats.servers | default (list "nats://127.0.0.1:4222")) }}
{{- end }}
{{- range $key := list "stream" "digest_stream" "digest_prefix" }}
{{- if and (not (hasKey $nats $key)) (hasKey $bridgeNats $key) }}
{{- $_ := set $nats $key (get $bridgeNats $key) }}
{{- end }}
{{- end }}
{{- $prefix := $bridgeNats.subject_prefix | default "k8s.events" }}
{{- $cluster := dig "cluster" "name" nil $bridge }}
{{- if eq .sub "remediation" }}
{{- $kube := $config.kubernetes | default dict }}
{{- if not $kube.cluster }}
{{- if not $cluster }}
{{- fail "remediation.config.kubernetes.cluster: the cluster the worker acts on is needed (the bridge's config.cluster.name is unset)" }}
{{- end }}
{{- $_ := set $kube "cluster" $cluster }}
{{- end }}
{{- $_ := set $config "kubernetes" $kube }}
{{- if not (hasKey $nats "subjects") }}
{{- $_ := set $nats "subjects" (list (printf "%s.%s.*.Pod.>" $prefix $kube.cluster)) }}
{{- end }}
{{- $rem := $config.remediation | default dict }}
{{- $ns := $rem.namespaces | default dict }}
{{- $_ := set $ns "allow" .ctx.Values.remediation.namespaces }}
{{- $_ := set $rem "namespaces" $ns }}
{{- $_ := set $config "remediation" $rem }}
{{- else if and (ne .sub "digests") (ne ($nats.reads | default "events") "digests") }}
{{- /* the digests' program reads the whole stream (its consumers have no filter), a
subscriber with nats.reads: digests all of <digest_prefix>.> (it refuses subjects) */}}
{{- if not (hasKey $nats "subjects") }}
{{- $_ := set $nats "subjects" (list (printf "%s.>" $prefix)) }}
{{- end }}
{{- end }}
{{- if eq .sub "alerting" }}
{{- /* one generatorURL for both replicas (by default it names the durable, each Pod's
own): either takes back, after a restart, the alerts Alertmanager shows from the other */}}
{{- $alerts := $config.alerts | default dict }}
{{- if not $alerts.generator_url }}
{{- $read := $nats.stream | default "K8S_EVENTS" }}
{{- if eq ($nats.reads | default "events") "digests" }}{{ $read = $nats.digest_stream | default "K8S_DIGESTS" }}{{ end }}
{{- $_ := set $alerts "generator_url" (printf "nats://%s/%s" $read (include "k8s-event-bridge.subscriber.fullname" .)) }}
{{- end }}
{{- $_ := set $config "alerts" $alerts }}
{{- end }}
{{- $files := fromYaml (include "k8s-event-bridge.secretFileConfig" (dict "v" $v.nats "service" "nats" "where" (printf "%s.nats" .sub))) }}
{{- $_ := set $config "nats" (mergeOverwrite $nats $files) }}
{{- if eq .sub "alerting" }}
{{- $am := $config.alertmanager | default dict }}
{{- $files := fromYaml (include "k8s-event-bridge.secretFileConfig" (dict "v" $v.alertmanager "service" "alertmanager" "where" "alerting.alertmanager")) }}
{{- $_ := set $config "alertmanager" (mergeOverwrite $am $files) }}
{{- end }}
{{- if eq .sub "otlp" }}
{{- $endpoint := $config.otlp | default dict }}
{{- $files := fromYaml (include "k8s-event-bridge.secretFileConfig" (dict "v" $v.otlp "service" "otlp" "where" "otlp.otlp")) }}
{{- $_ := set $config "otlp" (mergeOverwrite $endpoint $files) }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* The secret files of a subscriber: the argument of secretVolumes and secretVolumeMounts. */}}
{{- define "k8s-event-bridge.subscriber.secrets" -}}
{{- $v := get .ctx.Values .sub }}
{{- $out := list (dict "v" $v.nats "service" "nats" "where" (printf "%s.nats" .sub)) }}
{{- if eq .sub "alerting" }}
{{- $out = append $out (dict "v" $v.alertmanager "service" "alertmanager" "where" "alerting.alertmanager") }}
{{- end }}
{{- if eq .sub "otlp" }}
{{- $out = append $out (dict "v" $v.otlp "service" "otlp" "where" "otlp.otlp") }}
{{- end }}
{{- toYaml (dict "list" $out) }}
{{- end }}
