{{/*
Names. The name prefix of every object is "fullname": the release name, plus the chart name
unless one already contains the other (`helm install gpushare ...` and `helm install
gpushare-dra-driver-prod ...` give "gpushare" and "gpushare-dra-driver-prod"). Sprig's
`contains` takes the substring first. Cluster-scoped objects carry it too, so two releases
never collide.
*/}}
{{- define "gpushare.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpushare.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if or (contains $name .Release.Name) (contains .Release.Name $name) }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpushare.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object; "component" is added per component. */}}
{{- define "gpushare.labels" -}}
helm.sh/chart: {{ include "gpushare.chart" . }}
{{ include "gpushare.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpushare-dra-driver
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gpushare.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpushare.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Per-component object names. */}}
{{- define "gpushare.controller.name" -}}{{ include "gpushare.fullname" . }}-controller{{- end }}
{{- define "gpushare.plugin.name" -}}{{ include "gpushare.fullname" . }}-kubelet-plugin{{- end }}
{{- define "gpushare.webhook.name" -}}{{ include "gpushare.fullname" . }}-webhook{{- end }}
{{- define "gpushare.webhook.secret" -}}{{ .Values.webhook.tls.existingSecret | default (printf "%s-webhook-tls" (include "gpushare.fullname" .)) }}{{- end }}
{{- define "gpushare.installer.name" -}}{{ include "gpushare.fullname" . }}-hami-core-installer{{- end }}
{{- define "gpushare.cleanup.name" -}}{{ include "gpushare.fullname" . }}-cleanup{{- end }}

{{/*
The uninstall cleanup's hook annotations, for a hook weight (objects run lowest first): a
post-delete hook, replaced by a new run and removed once every hook succeeded.
*/}}
{{- define "gpushare.cleanup.hook" -}}
helm.sh/hook: post-delete
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/*
The label selector of the pods the cleanup waits for: the release's controller and kubelet
plugin (their selector labels plus the component), never the cleanup Job's own pod.
*/}}
{{- define "gpushare.cleanup.waitSelector" -}}
app.kubernetes.io/name={{ include "gpushare.name" . }},app.kubernetes.io/instance={{ .Release.Name }},app.kubernetes.io/component in (controller,kubelet-plugin)
{{- end }}

{{/*
An image reference: [registry/]repository, then @digest when a digest is set (it wins over the
tag), else :tag. global.imageRegistry, when set, replaces the image's own registry.
Arguments: dict "image" <the image's values> "global" .Values.global "tag" <default tag>.
*/}}
{{- define "gpushare.imageRef" -}}
{{- $registry := .image.registry | default "" }}
{{- with .global }}{{ with .imageRegistry }}{{ $registry = . }}{{ end }}{{ end }}
{{- $ref := .image.repository }}
{{- with $registry }}{{ $ref = printf "%s/%s" (trimSuffix "/" .) $ref }}{{ end }}
{{- if .image.digest }}
{{- printf "%s@%s" $ref .image.digest }}
{{- else }}
{{- printf "%s:%s" $ref (default .tag .image.tag) }}
{{- end }}
{{- end }}

{{/*
The ServiceAccount a component runs as: `<component>.serviceAccount.name`, else the chart's
own name for it; an existing account (create: false) must be named.
Arguments: dict "ctx" $ "key" "controller"|"kubeletPlugin" "default" <chart's name>.
*/}}
{{- define "gpushare.serviceAccountName" -}}
{{- $sa := index .ctx.Values .key "serviceAccount" }}
{{- if $sa.name }}
{{- $sa.name }}
{{- else if $sa.create }}
{{- .default }}
{{- else }}
{{- fail (printf "%s.serviceAccount.name is needed when %s.serviceAccount.create is false: name the existing ServiceAccount the chart binds its RBAC to" .key .key) }}
{{- end }}
{{- end }}
{{- define "gpushare.controller.serviceAccount" -}}
{{- include "gpushare.serviceAccountName" (dict "ctx" . "key" "controller" "default" (include "gpushare.controller.name" .)) }}
{{- end }}
{{- define "gpushare.plugin.serviceAccount" -}}
{{- include "gpushare.serviceAccountName" (dict "ctx" . "key" "kubeletPlugin" "default" (include "gpushare.plugin.name" .)) }}
{{- end }}

{{/* The image of the driver's components; the tag defaults to the chart's appVersion. */}}
{{- define "gpushare.image" -}}
{{- include "gpushare.imageRef" (dict "image" .Values.image "global" .Values.global "tag" .Chart.AppVersion) }}
{{- end }}

{{/* The image HAMi-core's installer copies libvgpu.so from. */}}
{{- define "gpushare.installer.image" -}}
{{- include "gpushare.imageRef" (dict "image" .Values.hamiCore.installer.image "global" .Values.global "tag" "") }}
{{- end }}

{{/*
Names derived from the driver name, as dra_driver/api/driver.py derives them.
*/}}
{{- define "gpushare.leaseName" -}}{{ .Values.driverName }}-controller{{- end }}
{{- define "gpushare.pluginDir" -}}{{ .Values.kubeletPlugin.kubeletDir }}/plugins/{{ .Values.driverName }}{{- end }}

{{/*
The label that keeps a pod (or a claim) away from the webhook. The chart's own pods carry it,
so the driver never waits for its own webhook.
*/}}
{{- define "gpushare.webhookOptOutLabel" -}}{{ .Values.driverName }}/webhook{{- end }}

{{/* Namespaces the webhooks never see. */}}
{{- define "gpushare.webhook.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- range (uniq (concat (list .Release.Namespace "kube-system") .Values.webhook.excludeNamespaces)) }}
        - {{ . | quote }}
        {{- end }}
{{- end }}

{{/*
The CEL condition of the pod webhook (admissionregistration.k8s.io/v1 matchConditions): a pod
that references resource claims. tests/deploy evaluates it against the webhook's own code.
*/}}
{{- define "gpushare.webhook.podMatchCondition" -}}
has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0
{{- if include "gpushare.gate.policy" . }} && !(has(object.metadata.annotations) && {{ include "gpushare.gate.policyKey" . | quote }} in object.metadata.annotations && has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(g, g.name == {{ include "gpushare.gate.name" . | quote }}))
{{- end }}
{{- end }}

{{/*
Claims kube-controller-manager generates for a pod from a template are not sent: the template
was checked when it was created (docs/webhook.md). Templates and pre-made claims are sent.
*/}}
{{- define "gpushare.webhook.claimMatchCondition" -}}
!has(object.metadata.ownerReferences) || !object.metadata.ownerReferences.exists(r, r.kind == "Pod" && has(r.controller) && r.controller)
{{- end }}

{{/* The pod scheduling gate (DriverNames.scheduling_gate). */}}
{{- define "gpushare.gate.name" -}}{{ .Values.driverName }}/allocation{{- end }}

{{/*
The gate policy's key (DriverNames.policy_gate): the label of the templates it reads, and the
annotation it leaves on the pods it gated.
*/}}
{{- define "gpushare.gate.policyKey" -}}{{ .Values.driverName }}/policy-gate{{- end }}

{{/*
Whether the MutatingAdmissionPolicy gates pods of marked templates: gate.mode=policy, or auto
where the API server serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (1.36+).
*/}}
{{- define "gpushare.gate.policy" -}}
{{- if include "gpushare.gate.enabled" . }}
{{- $mode := .Values.gate.mode }}
{{- if or (eq $mode "policy") (and (eq $mode "auto") (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")) }}true{{- end }}
{{- end }}
{{- end }}

{{/* The webhook is served (and the mutating gate installed) only when enabled. */}}
{{- define "gpushare.gate.enabled" -}}
{{- if and .Values.webhook.enabled .Values.gate.enabled }}true{{- end }}
{{- end }}
