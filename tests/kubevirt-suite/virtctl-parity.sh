#!/usr/bin/env bash
# KubeVirt's virtctl and Ferrovirt's, side by side on the local cluster: the same commands on
# the same VM state must give the same exit code, and where KubeVirt's names the object in its
# error, ours must too. Each state-changing command is run once through each virtctl (start
# with one, stop with the other, ...), and the VM's state is checked after it; a port-forward
# through each reaches a server in the guest.
#
# Usage: tests/kubevirt-suite/virtctl-parity.sh KUBEVIRT_VIRTCTL FERROVIRT_VIRTCTL
# Exit status: 0 when every comparison held, 1 otherwise.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../cluster/lib/common.sh
source "$here/../cluster/lib/common.sh"

kv=${1:?usage: $0 KUBEVIRT_VIRTCTL FERROVIRT_VIRTCTL}
fv=${2:?usage: $0 KUBEVIRT_VIRTCTL FERROVIRT_VIRTCTL}
[[ -x $kv ]] || { echo "virtctl-parity: $kv is not an executable" >&2; exit 2; }
[[ -x $fv ]] || { echo "virtctl-parity: $fv is not an executable (build it: cargo build --release -p virtctl)" >&2; exit 2; }

ns=ferrovirt-virtctl-parity
vm=parity-vm
failures=0
checks=0
work=$(mktemp -d)
trap 'kubectl_admin delete namespace "$ns" --ignore-not-found --wait=false >/dev/null; rm -rf "$work"' EXIT

run() { # run WHICH ARGS...: one virtctl, its output in $work/WHICH.out, its exit code echoed
  local which=$1 bin
  shift
  bin=$kv
  [[ $which == fv ]] && bin=$fv
  timeout 120 "$bin" --kubeconfig "$ADMIN_KUBECONFIG" -n "$ns" "$@" >"$work/$which.out" 2>&1
  echo $?
}

# same ARGS...: both virtctls on the same (unchanged) state: equal exit codes, and a quoted
# name in KubeVirt's error message appears in ours.
same() {
  local a b
  a=$(run kv "$@")
  b=$(run fv "$@")
  checks=$((checks + 1))
  local verdict=ok
  if [[ $a != "$b" ]]; then
    verdict="DIFFERENT exit codes"
  elif ((a != 0)); then
    local name
    # (KubeVirt's virtctl also prints JSON log lines: not those.)
    name=$(grep -v '^{' "$work/kv.out" | grep -o '"[a-z0-9.-]*"' | head -n 1)
    if [[ -n $name ]] && ! grep -qF -- "$name" "$work/fv.out"; then
      verdict="ours does not name $name"
    fi
  fi
  [[ $verdict == ok ]] || failures=$((failures + 1))
  printf '%-10s virtctl %-32s kubevirt %s, ferrovirt %s\n' "$verdict" "$*" "$a" "$b"
  if [[ $verdict != ok ]]; then
    sed 's/^/             kubevirt: /' "$work/kv.out" | head -n 3
    sed 's/^/             ferrovirt: /' "$work/fv.out" | head -n 3
  fi
}

# identical ARGS...: a command that only prints a manifest (`create ...`): both virtctls print
# the same bytes on stdout and on stderr, with the same exit code (KubeVirt's version warning
# aside).
identical() {
  local a b verdict=ok which
  for which in kv fv; do
    local bin=$kv
    [[ $which == fv ]] && bin=$fv
    timeout 60 "$bin" --kubeconfig "$ADMIN_KUBECONFIG" "$@" >"$work/$which.stdout" 2>"$work/$which.stderr"
    echo $? >"$work/$which.rc"
  done
  a=$(cat "$work/kv.rc")
  b=$(cat "$work/fv.rc")
  # KubeVirt's warns on a failed command that its version is not the cluster's: not compared.
  sed -i '/^You are using a client virtctl version/,/^$/d' "$work/kv.stderr"
  checks=$((checks + 1))
  if [[ $a != "$b" ]]; then
    verdict="DIFFERENT exit codes"
  elif ! cmp -s "$work/kv.stdout" "$work/fv.stdout"; then
    verdict="DIFFERENT output"
  elif ! cmp -s "$work/kv.stderr" "$work/fv.stderr"; then
    verdict="DIFFERENT messages"
  fi
  [[ $verdict == ok ]] || failures=$((failures + 1))
  printf '%-10s virtctl %s: kubevirt %s, ferrovirt %s\n' "$verdict" "$*" "$a" "$b"
  if [[ $verdict != ok ]]; then
    diff "$work/kv.stdout" "$work/fv.stdout" | head -n 10 | sed 's/^/             /'
    diff "$work/kv.stderr" "$work/fv.stderr" | head -n 5 | sed 's/^/             /'
  fi
}

# step WHICH EXPECTED-STATUS ARGS...: one virtctl changes the VM; it must succeed and the VM
# must reach EXPECTED-STATUS (its printableStatus).
step() {
  local which=$1 want=$2 rc
  shift 2
  rc=$(run "$which" "$@")
  checks=$((checks + 1))
  local status="" deadline=$((SECONDS + 180))
  while ((SECONDS < deadline)); do
    status=$(kubectl_admin -n "$ns" get vm "$vm" -o jsonpath='{.status.printableStatus}' 2>/dev/null)
    [[ $status == "$want" ]] && break
    sleep 1
  done
  local verdict=ok
  if [[ $rc != 0 ]]; then
    verdict="FAILED (exit $rc)"
  elif [[ $status != "$want" ]]; then
    verdict="VM is $status, not $want"
  fi
  [[ $verdict == ok ]] || failures=$((failures + 1))
  local who=kubevirt
  [[ $which == fv ]] && who=ferrovirt
  printf '%-10s %s virtctl %s -> %s\n' "$verdict" "$who" "$*" "$want"
  [[ $verdict == ok ]] || sed 's/^/             /' "$work/$which.out" | head -n 3
}

# forward WHICH LOCAL-PORT: that virtctl's `port-forward vmi/VM LOCAL-PORT:8080` in the
# background, where the guest's userData serves one line computed by its shell; the line must
# come through the local port within 90 s.
forward() {
  local which=$1 port=$2 bin=$kv who=kubevirt got="" verdict=ok
  [[ $which == fv ]] && { bin=$fv; who=ferrovirt; }
  "$bin" --kubeconfig "$ADMIN_KUBECONFIG" -n "$ns" port-forward "vmi/$vm" "$port:8080" \
    >"$work/$which.out" 2>&1 &
  local pid=$! deadline=$((SECONDS + 90))
  while ((SECONDS < deadline)); do
    # shellcheck disable=SC2016 # $0 is the port, expanded by the inner shell
    got=$(timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" && head -n 1 <&3' "$port" 2>/dev/null)
    [[ $got == parity-answer-42 ]] && break
    sleep 1
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  checks=$((checks + 1))
  [[ $got == parity-answer-42 ]] || { verdict="NOT REACHED (got ${got:-nothing})"; failures=$((failures + 1)); }
  printf '%-10s %s virtctl port-forward vmi/%s %s:8080 -> the guest answered\n' "$verdict" "$who" "$vm" "$port"
  [[ $verdict == ok ]] || sed 's/^/             /' "$work/$which.out" | head -n 3
}

kubectl_admin delete namespace "$ns" --ignore-not-found --wait=true --timeout=120s >/dev/null
kubectl_admin create namespace "$ns" >/dev/null
disk=$(kubectl_admin get vm vm-cirros -n default -o jsonpath='{.spec.template.spec.volumes[0].containerDisk.image}' 2>/dev/null)
[[ -n $disk ]] || { echo "virtctl-parity: no vm-cirros in the default namespace to take a disk image from (run hack/up.sh)" >&2; exit 2; }
kubectl_admin -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: $vm
spec:
  runStrategy: Halted
  template:
    spec:
      domain:
        devices:
          disks:
          - name: containerdisk
            disk: {bus: virtio}
          - name: cloudinitdisk
            disk: {bus: virtio}
        resources:
          requests: {memory: 128Mi}
      terminationGracePeriodSeconds: 5
      volumes:
      - name: containerdisk
        containerDisk: {image: $disk}
      - name: cloudinitdisk
        cloudInitNoCloud:
          userData: |
            #!/bin/sh
            printf '#!/bin/sh\necho parity-answer-\$((6 * 7))\n' >/tmp/answer
            chmod +x /tmp/answer
            nc -ll -p 8080 -e /tmp/answer &
EOF

# Nothing of that name.
same start no-such-vm
same stop no-such-vm
same restart no-such-vm
same pause vm no-such-vm
same unpause vmi no-such-vm
same migrate no-such-vm
same soft-reboot no-such-vm
same reset no-such-vm
same vnc screenshot no-such-vm -f "$work/shot.png"
same vnc no-such-vm --proxy-only
same guestosinfo no-such-vm
same userlist no-such-vm
same fslist no-such-vm
# Wrong usage.
same start
same pause
same pause vm
same stop "$vm" --force
same ssh
same scp
same reset
same vnc screenshot
same vnc
# The VM is stopped.
same stop "$vm"
same pause vm "$vm"
same unpause vm "$vm"
# Through one, then the other.
step kv Running start "$vm"
same start "$vm"
# A TCP port of the guest, through each.
forward kv 18080
forward fv 18081
step fv Paused pause vm "$vm"
same pause vm "$vm"
step kv Running unpause vm "$vm"
step fv Stopped stop "$vm"
step fv Running start "$vm"
step kv Paused pause vmi "$vm"
step fv Running unpause vmi "$vm"
step kv Running reset "$vm"
step fv Running reset "$vm"
# No graphics device (none was asked for): refused by both.
same vnc screenshot "$vm" -f "$work/shot.png"
step kv Stopped stop "$vm"
same version
# Manifests written on the client.
identical create vm --name parity --instancetype virtualmachineinstancetype/small \
  --preference cores --volume-containerdisk src:"$disk",bootorder:1 --termination-grace-period 0
identical create vm --name parity --memory 256Mi --run-strategy Halted \
  --volume-containerdisk src:"$disk" --user cirros --ssh-key "ssh-ed25519 AAAA parity"
identical create vm --name parity --volume-pvc src:my-claim,name:root
identical create vm --name parity --instancetype small --memory 1Gi
identical create vm --name parity --volume-containerdisk src:"$disk",bootorder:x
identical create instancetype --name small --cpu 2 --memory 1Gi --namespaced
identical create preference --name cores --cpu-topology preferCores

echo
echo "virtctl parity: $((checks - failures)) of $checks checks held"
((failures == 0))
