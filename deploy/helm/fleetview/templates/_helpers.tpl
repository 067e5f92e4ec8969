{{- define "fleetview.fullname" -}}
{{- printf "%s-%s" .Release.Name .Values.mode | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- define "fleetview.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- define "fleetview.labels" -}}
app.kubernetes.io/name: fleetview
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ .Values.mode }}
{{- end -}}

{{/*
fleetview.natsMode checks the NATS authentication values and prints the mode.
*/}}
{{- define "fleetview.natsMode" -}}
{{- $mode := .Values.nats.auth.mode }}
{{- if not (has $mode (list "users" "token")) }}
{{- fail (printf "nats.auth.mode must be \"users\" (per-cluster credentials) or \"token\" (one token shared by every collector), not %q" (toString $mode)) }}
{{- end }}
{{- if and (eq $mode "token") (not .Values.nats.tokenSecret) }}
{{- fail "nats.auth.mode=token needs nats.tokenSecret (a Secret with key \"token\")" }}
{{- end }}
{{- if and (eq $mode "token") .Values.nats.users }}
{{- fail "nats.users is set but nats.auth.mode=token: per-cluster users and a shared token cannot be combined" }}
{{- end }}
{{- $mode -}}
{{- end -}}

{{/*
fleetview.checkUserLine refuses a "<cluster>:<password>" line the fleetview
binary would refuse at start (internal/natsserver checkSecret,
stream.ValidateCluster), so a bad credential fails the install, not the pod.
Argument: dict "line" "where".
*/}}
{{- define "fleetview.checkUserLine" -}}
{{- $parts := splitn ":" 2 .line }}
{{- $cluster := $parts._0 }}
{{- $pass := default "" $parts._1 }}
{{- if or (gt (len $cluster) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $cluster)) }}
{{- fail (printf "%s: cluster %q is not a DNS label (want <cluster>:<password>)" .where $cluster) }}
{{- end }}
{{- if lt (len $pass) 16 }}
{{- fail (printf "%s: the NATS password of cluster %s is shorter than 16 characters" .where $cluster) }}
{{- end }}
{{- if not (regexMatch "^[!#%-\\[\\]-~]+$" $pass) }}
{{- fail (printf "%s: the NATS password of cluster %s must be printable ASCII without quotes, backslashes, '$' or spaces" .where $cluster) }}
{{- end }}
{{- end -}}

{{/*
fleetview.secretData prints the base64-decoded value of key in an existing
Secret, or nothing when no cluster is reachable (helm template without
--dry-run=server). When a cluster is reachable and the Secret or key is
missing the install fails here, before any pod waits on a volume that never
mounts (this is what makes the users default safe for an upgrade of a
token install: the upgrade stops, the running hub keeps running).
Argument: dict "ctx" . "name" "key" "what".
*/}}
{{- define "fleetview.secretData" -}}
{{- $ns := .ctx.Release.Namespace }}
{{- $s := lookup "v1" "Secret" $ns .name }}
{{- if $s }}
{{- $v := index (default (dict) $s.data) .key }}
{{- if not $v }}
{{- fail (printf "Secret %s/%s has no key %q (%s)" $ns .name .key .what) }}
{{- end }}
{{- b64dec $v }}
{{- else }}
{{- /* Empty for a missing Secret and for no cluster at all; a list tells them apart. */}}
{{- $all := lookup "v1" "Secret" $ns "" }}
{{- if hasKey $all "kind" }}
{{- fail (printf "Secret %s/%s not found: create it with key %q (%s)" $ns .name .key .what) }}
{{- end }}
{{- end }}
{{- end -}}
