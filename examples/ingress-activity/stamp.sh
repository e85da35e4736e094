#!/usr/bin/env bash
# Stamps the Challenges whose HTTP instances players use, from ingress-nginx's access log: the
# activity stamper's counterpart for HTTP (the TCP gateway's sessions are the stamper's).
#
# Reads ingress-nginx's access log in its default format on stdin, finds each request's upstream
# ($proxy_upstream_name: <namespace>-<service>-<port>), maps it to its Challenge through the
# Services the hook created (label ctf.challenge-hook.dev/challenge), and writes the Challenge's
# ctf.challenge-hook.dev/last-activity at most once per STAMP_EVERY seconds (default 120: keep it
# at most a quarter of your smallest idleTimeout). Requests to anything else are skipped.
#
# Run it with the activity stamper's ServiceAccount (challenge-hook-activity-stamper: list Services,
# patch Challenges, and the admission policy lets it move that one annotation forward only):
#
#   kubectl -n ingress-nginx logs -f --since=10s deploy/ingress-nginx-controller \
#     | KUBECTL="kubectl --as=system:serviceaccount:challenge-hook:challenge-hook-activity-stamper" \
#       examples/ingress-activity/stamp.sh
#
# or as a container beside it in the same Pod, reading the controller's log from a shared file.
set -euo pipefail
every=${STAMP_EVERY:-120}
refresh_every=${REFRESH_SECONDS:-30}
read -r -a kubectl <<<"${KUBECTL:-kubectl}"

declare -A challenge_of stamped
refreshed=-1
# refresh maps every upstream name of the hook's Services to <namespace> <challenge>.
refresh() {
  challenge_of=()
  local ns name chal ports port
  while read -r ns name chal ports; do
    for port in ${ports//,/ }; do
      challenge_of["$ns-$name-$port"]="$ns $chal"
    done
  done < <("${kubectl[@]}" get services --all-namespaces -l ctf.challenge-hook.dev/challenge \
    -o jsonpath='{range .items[*]}{.metadata.namespace} {.metadata.name} {.metadata.labels.ctf\.challenge-hook\.dev/challenge} {range .spec.ports[*]}{.port},{end}{"\n"}{end}')
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
  if [[ -z ${challenge_of[$upstream]+set} ]] && ((SECONDS - refreshed >= refresh_every || refreshed < 0)); then
    refresh # a Service created since the last look
  fi
  [[ -n ${challenge_of[$upstream]+set} ]] || continue
  read -r ns chal <<<"${challenge_of[$upstream]}"
  key="$ns/$chal"
  now=$SECONDS
  if [[ -n ${stamped[$key]+set} ]] && ((now - stamped[$key] < every)); then
    continue
  fi
  stamped[$key]=$now
  if ! "${kubectl[@]}" annotate --overwrite challenges.ctf.challenge-hook.dev -n "$ns" "$chal" \
    "ctf.challenge-hook.dev/last-activity=$(date -u +%Y-%m-%dT%H:%M:%SZ)" >/dev/null; then
    echo "stamp.sh: could not stamp $key (deleted, or refused: see the message above)" >&2
  fi
done
