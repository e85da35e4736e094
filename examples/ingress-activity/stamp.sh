#!/usr/bin/env bash
# Stamps the Services of the HTTP instances players use, from ingress-nginx's access log: the
# activity stamper's counterpart for HTTP (the TCP gateway's sessions are the stamper's).
#
# Reads ingress-nginx's access log in its default format on stdin, finds each request's upstream
# ($proxy_upstream_name: <namespace>-<service>-<port>) among the Services the hook created in
# NAMESPACES (comma-separated, default ctf: the namespaces of instances) for instances that idle
# (their annotation ctf.challenge-hook.dev/idle-timeout), and writes that Service's
# ctf.challenge-hook.dev/last-activity, which the hook's idle clock reads, at most once per
# STAMP_EVERY seconds (default 120: keep it at most a quarter of your smallest idleTimeout).
# Requests to anything else are skipped.
#
# Run it with the activity stamper's ServiceAccount (challenge-hook-activity-stamper: get, list
# and patch Services where its RoleBindings are, and the admission policy lets it move that one
# annotation forward only; no Challenge):
#
#   kubectl -n ingress-nginx logs -f --since=10s deploy/ingress-nginx-controller \
#     | KUBECTL="kubectl --as=system:serviceaccount:challenge-hook:challenge-hook-activity-stamper" \
#       NAMESPACES=ctf examples/ingress-activity/stamp.sh
#
# or as a container beside it in the same Pod, reading the controller's log from a shared file.
set -euo pipefail
every=${STAMP_EVERY:-120}
refresh_every=${REFRESH_SECONDS:-30}
read -r -a kubectl <<<"${KUBECTL:-kubectl}"
IFS=, read -r -a namespaces <<<"${NAMESPACES:-ctf}"

declare -A service_of stamped
refreshed=-1
# refresh maps every upstream name of the hook's Services of idling instances to <namespace> <service>.
refresh() {
  service_of=()
  local ns name ports idle port
  for ns in "${namespaces[@]}"; do
    while read -r name ports idle; do
      [[ -n $idle ]] || continue # an instance that does not idle: nothing to stamp
      for port in ${ports//,/ }; do
        service_of["$ns-$name-$port"]="$ns $name"
      done
    done < <("${kubectl[@]}" get services -n "$ns" -l ctf.challenge-hook.dev/challenge \
      -o jsonpath='{range .items[*]}{.metadata.name} {range .spec.ports[*]}{.port},{end} {.metadata.annotations.ctf\.challenge-hook\.dev/idle-timeout}{"\n"}{end}')
  done
  refreshed=$SECONDS
}

# The default log format, read by position from the start of the line:
#   $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer"
#   "$http_user_agent" $request_length $request_time [$proxy_upstream_name]
#   [$proxy_alternative_upstream_name] $upstream_addr ...
# A player writes $remote_user, $request, $http_referer and $http_user_agent, brackets included,
# but no double quote (nginx logs it as \x22, unless the controller's log-format-escape-none is
# set: keep it unset): the upstream is the first bracketed field after the sixth double quote and
# two numbers, never one a player wrote.
pattern='^[^"]* "[^"]*" [0-9]+ [0-9]+ "[^"]*" "[^"]*" [0-9]+ [0-9.]+ \[([^] ]+)\] \[[^]]*\] '
while IFS= read -r line; do
  [[ $line =~ $pattern ]] || continue
  upstream=${BASH_REMATCH[1]}
  if [[ -z ${service_of[$upstream]+set} ]] && ((SECONDS - refreshed >= refresh_every || refreshed < 0)); then
    refresh # a Service created since the last look
  fi
  [[ -n ${service_of[$upstream]+set} ]] || continue
  read -r ns name <<<"${service_of[$upstream]}"
  key="$ns/$name"
  now=$SECONDS
  if [[ -n ${stamped[$key]+set} ]] && ((now - stamped[$key] < every)); then
    continue
  fi
  stamped[$key]=$now
  if ! "${kubectl[@]}" annotate --overwrite services -n "$ns" "$name" \
    "ctf.challenge-hook.dev/last-activity=$(date -u +%Y-%m-%dT%H:%M:%SZ)" >/dev/null; then
    echo "stamp.sh: could not stamp Service $key (deleted, or refused: see the message above)" >&2
  fi
done
