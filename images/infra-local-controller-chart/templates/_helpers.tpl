{{/*
An image reference as the appliance names it, or with its registry part replaced by
images.registry.
*/}}
{{- define "ilc.image" -}}
{{- if .Values.images.registry -}}
{{ trimSuffix "/" .Values.images.registry }}/{{ regexReplaceAll "^[^/]+/" .image "" }}
{{- else -}}
{{ .image }}
{{- end -}}
{{- end }}

{{/* The provisioning network's digest, as the appliance's first boot computes it: a change restarts Ironic's pods. */}}
{{- define "ilc.provisioningDigest" -}}
{{- with .Values.provisioning -}}
{{- if .interface -}}
{{ printf "%s %s %s" .interface .address .dhcpRange | sha256sum | trunc 16 }}
{{- else -}}
none
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The one address Ironic's API and boot-file server listen on when metal3.ironicListenAll is
false (the chart has no firewall in front of them): the provisioning address, or "" for the
node's own address (status.hostIP) on a site without a provisioning network.
*/}}
{{- define "ilc.ironicAddress" -}}
{{- if and (not .Values.metal3.ironicListenAll) .Values.provisioning.interface -}}
{{ regexReplaceAll "/.*$" .Values.provisioning.address "" }}
{{- end -}}
{{- end }}

{{/* Ironic's pod bound to that address: both listeners, my_ip, and the probes that must reach it. */}}
{{- define "ilc.bindIronic" -}}
{{- $address := include "ilc.ironicAddress" (dict "Values" .Values) -}}
{{- $listen := dict "name" "IRONIC_LISTEN_IP" -}}
{{- $myIp := dict "name" "IRONIC_IP" -}}
{{- if $address -}}
{{- $_ := set $listen "value" $address -}}
{{- $_ := set $myIp "value" $address -}}
{{- else -}}
{{- $_ := set $listen "valueFrom" (dict "fieldRef" (dict "fieldPath" "status.hostIP")) -}}
{{- $_ := set $myIp "valueFrom" (dict "fieldRef" (dict "fieldPath" "status.hostIP")) -}}
{{- end -}}
{{- range $c := .pod.containers -}}
{{- $_ := set $c "env" (append (default (list) $c.env) $listen) -}}
{{- if eq $c.name "ironic" -}}
{{- $_ := set $c "env" (append $c.env $myIp) -}}
{{- if $address -}}
{{- range $probe := list $c.startupProbe $c.livenessProbe $c.readinessProbe -}}
{{- if $probe -}}
{{- $_ := set $probe.httpGet "host" $address -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- else if and $address $c.readinessProbe -}}
{{- $_ := set $c.readinessProbe.tcpSocket "host" $address -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* Whether a file under files/ is installed with these values. */}}
{{- define "ilc.wanted" -}}
{{- if eq .path "files/manifests/metal3/provisioning/dnsmasq.yaml" -}}
{{- if .Values.provisioning.interface }}yes{{ end -}}
{{- else -}}
yes
{{- end -}}
{{- end }}

{{/* An env entry of a container set to a value, or removed when the value is empty. */}}
{{- define "ilc.setEnv" -}}
{{- $kept := list -}}
{{- range $e := .container.env -}}
{{- if eq $e.name $.name -}}
{{- if $.value -}}
{{- $_ := set $e "value" $.value -}}
{{- $kept = append $kept $e -}}
{{- end -}}
{{- else if and (not $.value) $.alsoDrop (has $e.name $.alsoDrop) -}}
{{- else -}}
{{- $kept = append $kept $e -}}
{{- end -}}
{{- end -}}
{{- $_ := set .container "env" $kept -}}
{{- end }}

{{/*
One object of the appliance's manifests, edited in place for the values (what the
appliance's first boot does with sed, and what a cluster of one's own needs). Sets
"ilcDrop" on an object these values leave out.
*/}}
{{- define "ilc.edit" -}}
{{- $o := .obj -}}
{{- $v := .Values -}}
{{- $kind := $o.kind -}}
{{- $name := $o.metadata.name -}}
{{- if or (eq $kind "CustomResourceDefinition") (eq $kind "Namespace") -}}
{{- /* Kept on uninstall: deleting a CRD deletes every Provisioning and BareMetalHost. */ -}}
{{- $annotations := default (dict) $o.metadata.annotations -}}
{{- $_ := set $annotations "helm.sh/resource-policy" "keep" -}}
{{- $_ := set $o.metadata "annotations" $annotations -}}
{{- end -}}
{{- if eq .path "files/metal3/role.yaml" -}}
{{- if eq $kind "ClusterRole" -}}
{{- $_ := set $o.metadata "name" "metal3-baremetal-operator" -}}
{{- else -}}
{{- $_ := set $o "ilcDrop" true -}}
{{- end -}}
{{- end -}}
{{- if eq $kind "Deployment" -}}
{{- $pod := $o.spec.template.spec -}}
{{- range $c := $pod.containers -}}
{{- $_ := set $c "image" (include "ilc.image" (dict "image" $c.image "Values" $v)) -}}
{{- end -}}
{{- if eq $name "bpa-operator" -}}
{{- $_ := include "ilc.setEnv" (dict "container" (index $pod.containers 0) "name" "BPA_ADDONS_REGISTRY_IP" "value" (required "registry.address: the IP address pods reach the registry at" $v.registry.address)) -}}
{{- else if eq $name "bpa-api" -}}
{{- range $alias := $pod.hostAliases -}}
{{- $_ := set $alias "ip" (required "registry.address: the IP address pods reach the registry at" $v.registry.address) -}}
{{- end -}}
{{- else if eq $name "baremetal-operator" -}}
{{- $_ := include "ilc.setEnv" (dict "container" (index $pod.containers 0) "name" "KUBERNETES_SERVICE_HOST" "value" $v.kubernetesApi.address "alsoDrop" (list "KUBERNETES_SERVICE_PORT")) -}}
{{- if include "ilc.ironicAddress" (dict "Values" $v) -}}
{{- /* Ironic on the provisioning address only: reached from a pod on its own node. */ -}}
{{- $_ := set $pod "affinity" (dict "podAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list (dict "labelSelector" (dict "matchLabels" (dict "app.kubernetes.io/name" "ironic")) "topologyKey" "kubernetes.io/hostname")))) -}}
{{- end -}}
{{- else if or (eq $name "ironic") (eq $name "ironic-dnsmasq") -}}
{{- $_ := set $o.spec.template.metadata.annotations "icn.akraino.org/provisioning-network" (include "ilc.provisioningDigest" (dict "Values" $v)) -}}
{{- if and (eq $name "ironic") (not $v.metal3.ironicListenAll) -}}
{{- $_ := include "ilc.bindIronic" (dict "pod" $pod "Values" $v) -}}
{{- end -}}
{{- end -}}
{{- else if and (eq $kind "ConfigMap") (eq $name "bpa-config") -}}
{{- $config := index $o.data "config.yaml" -}}
{{- $runner := regexFind "runnerImage: \\S+" $config | trimPrefix "runnerImage: " -}}
{{- $config = replace (printf "runnerImage: %s" $runner) (printf "runnerImage: %s" (include "ilc.image" (dict "image" $runner "Values" $v))) $config -}}
{{- $config = replace "bootstrap.icn" (required "nodeFacingAddress: how the compute nodes reach the registry and the file server" $v.nodeFacingAddress) $config -}}
{{- /* The chart's own registry and file server listen on their serve ports. */ -}}
{{- if $v.serve.registry.enabled -}}
{{- $config = regexReplaceAll "(?m)^registryHost: .*$" $config (printf "registryHost: %s:%v" $v.nodeFacingAddress $v.serve.registry.port) -}}
{{- end -}}
{{- if $v.serve.files.enabled -}}
{{- $config = regexReplaceAll "(?m)^filesRepo: .*$" $config (printf "filesRepo: http://%s:%v/kubespray" $v.nodeFacingAddress $v.serve.files.port) -}}
{{- end -}}
{{- $_ := set $o.data "config.yaml" $config -}}
{{- else if and (eq $kind "ConfigMap") (eq $name "baremetal-operator-ironic") -}}
{{- range $key := list "DEPLOY_KERNEL_URL" "DEPLOY_RAMDISK_URL" -}}
{{- $_ := set $o.data $key (replace "http://127.0.0.1:8080/boot" (trimSuffix "/" $v.metal3.deployImagesUrl) (index $o.data $key)) -}}
{{- end -}}
{{- with include "ilc.ironicAddress" (dict "Values" $v) -}}
{{- $_ := set $o.data "IRONIC_ENDPOINT" (printf "http://%s:6385/v1/" (ternary (printf "[%s]" .) . (contains ":" .))) -}}
{{- end -}}
{{- else if and (eq $kind "Service") (eq $name "bpa-api") -}}
{{- $_ := set (index $o.spec.ports 0) "nodePort" (int $v.api.nodePort) -}}
{{- else if and (eq $kind "PersistentVolume") (eq $name "bpa-api-state") -}}
{{- if $v.api.storage.storageClass -}}
{{- $_ := set $o "ilcDrop" true -}}
{{- else -}}
{{- $_ := set $o.spec.hostPath "path" $v.api.storage.hostPath -}}
{{- $_ := set $o.spec.capacity "storage" $v.api.storage.size -}}
{{- end -}}
{{- else if and (eq $kind "PersistentVolumeClaim") (eq $name "bpa-api-state") -}}
{{- $_ := set $o.spec.resources.requests "storage" $v.api.storage.size -}}
{{- if $v.api.storage.storageClass -}}
{{- $_ := set $o.spec "storageClassName" $v.api.storage.storageClass -}}
{{- $_ := unset $o.spec "volumeName" -}}
{{- end -}}
{{- end -}}
{{- end }}
