{{/* The label every object carries (kustomize's `labels:` in deploy/base, deploy/scheduler/base). */}}
{{- define "spotshift.labels" -}}
app.kubernetes.io/part-of: spotshift
{{- end }}

{{- define "spotshift.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
On-demand capacity only, for every spotshift pod: a spot reclaim must not take the server, the rescheduler
mid-drain or the scheduler with it. NotIn also matches nodes without the label, so this holds on every provider.
*/}}
{{- define "spotshift.onDemandOnly" -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          - {key: karpenter.sh/capacity-type, operator: NotIn, values: [spot]}
          - {key: eks.amazonaws.com/capacityType, operator: NotIn, values: [SPOT]}
          - {key: cloud.google.com/gke-spot, operator: NotIn, values: ["true"]}
          - {key: cloud.google.com/gke-preemptible, operator: NotIn, values: ["true"]}
          - {key: kubernetes.azure.com/scalesetpriority, operator: NotIn, values: [spot]}
          - {key: node-role.kubernetes.io/spot-worker, operator: DoesNotExist}
{{- end }}

{{/* The container hardening of every spotshift container (Pod Security "restricted"). */}}
{{- define "spotshift.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{/* node_classes of each provider preset: what deploy/overlays/<provider>/config.yaml says. */}}
{{- define "spotshift.presets" -}}
gke:
  presets: [gke-spot, gke-preemptible]
eks:
  presets: [eks]
aks:
  presets: [aks]
karpenter:
  presets: [karpenter]
custom:
  presets: []
  spot_selectors:
    - node-role.kubernetes.io/spot-worker
  on_demand_selectors:
    - node-role.kubernetes.io/worker
  spot_tolerations:
    - {key: spotshift.io/spot, operator: Equal, value: "true", effect: NoSchedule}
  extra_reclaim_taints: []
{{- end }}

{{/* config.yaml: the provider's node classes (with nodeClasses over them), the release's namespace, config. */}}
{{- define "spotshift.config" -}}
{{- $presets := include "spotshift.presets" . | fromYaml -}}
{{- $classes := mergeOverwrite (deepCopy (get $presets .Values.provider)) (deepCopy .Values.nodeClasses) -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "node_classes" $classes -}}
{{- $_ := set $config "namespace" .Release.Namespace -}}
{{- toYaml $config -}}
{{- end }}

{{/* A ConfigMap's name with a hash of its data, as kustomize's configMapGenerator names it: a changed
configuration is a new name, so the Deployments that mount it roll. */}}
{{- define "spotshift.configName" -}}
spotshift-config-{{ include "spotshift.config" . | sha256sum | trunc 10 }}
{{- end }}

{{- define "spotshift.schedulerConfig" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: spotshift-scheduler
profiles:
  - schedulerName: spotshift-scheduler
extenders:
  - urlPrefix: https://spotshift.{{ .Release.Namespace }}.svc:443
    filterVerb: filter
    prioritizeVerb: prioritize
    weight: {{ .Values.scheduler.weight }}
    enableHTTPS: true
    tlsConfig:
      caFile: /etc/spotshift/ca/ca.crt
    httpTimeout: 5s
    nodeCacheCapable: true
    ignorable: true
    managedResources: []
{{- end }}

{{- define "spotshift.schedulerConfigName" -}}
spotshift-scheduler-config-{{ include "spotshift.schedulerConfig" . | sha256sum | trunc 10 }}
{{- end }}
